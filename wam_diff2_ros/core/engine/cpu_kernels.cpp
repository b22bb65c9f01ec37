// The fast engine's CPU kernels (loaded by cpu_kernels.py, which documents them): float32 products whose every
// output has the bits of a stock float32 GEMM that sums the input width in the given chunks. Each chunk is a fused
// multiply-add chain started from zero; chunk sums are added in order into their group's sum (groups: the width
// split into consecutive parts, as a GEMM that splits the width across threads does), and group sums are added in
// order. One group is plain chunked summation. Built with -DWAM_AVX512 for AVX-512, without it for AVX2 + FMA.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

constexpr int LANES = 16;
#if defined(WAM_AVX512)
struct Vec { __m512 v; };
static inline Vec vzero() { return {_mm512_setzero_ps()}; }
static inline Vec vload(const float* p) { return {_mm512_loadu_ps(p)}; }
static inline Vec vfma(float x, Vec w, Vec acc) { return {_mm512_fmadd_ps(_mm512_set1_ps(x), w.v, acc.v)}; }
static inline Vec vadd(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
static inline void vstore(float* p, Vec a) { _mm512_storeu_ps(p, a.v); }
#else
struct Vec { __m256 lo, hi; };
static inline Vec vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline Vec vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline Vec vfma(float x, Vec w, Vec acc) {
  const __m256 b = _mm256_set1_ps(x);
  return {_mm256_fmadd_ps(b, w.lo, acc.lo), _mm256_fmadd_ps(b, w.hi, acc.hi)};
}
static inline Vec vadd(Vec a, Vec b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static inline void vstore(float* p, Vec a) { _mm256_storeu_ps(p, a.lo); _mm256_storeu_ps(p + 8, a.hi); }
#endif

// Chunk ends and group ends (both ascending, both ending at the width; every group end is a chunk end).
struct Chunking {
  std::vector<int64_t> ends, groups;
};

static Chunking checked_chunking(std::vector<int64_t> ends, std::vector<int64_t> groups, int64_t width) {
  TORCH_CHECK(!ends.empty() && ends.back() == width, "chunks must end at the width");
  TORCH_CHECK(!groups.empty() && groups.back() == width, "groups must end at the width");
  for (size_t i = 0; i < ends.size(); ++i) TORCH_CHECK(ends[i] > (i ? ends[i - 1] : 0), "chunk ends must ascend");
  for (size_t i = 1; i < groups.size(); ++i) TORCH_CHECK(groups[i] > groups[i - 1], "group ends must ascend");
  for (const int64_t g : groups)
    TORCH_CHECK(std::find(ends.begin(), ends.end(), g) != ends.end(), "every group must end at a chunk end");
  return {std::move(ends), std::move(groups)};
}

// R rows x one tile of 16 columns (see the header for the order of the sums).
template <int R>
static void tile_rows(const float* x, int64_t width, const float* w, const Chunking& c, float* out,
                      int64_t out_stride) {
  Vec total[R], part[R];
  for (int r = 0; r < R; ++r) total[r] = part[r] = vzero();
  int64_t start = 0;
  size_t group = 0;
  for (const int64_t end : c.ends) {
    Vec acc[R];
    for (int r = 0; r < R; ++r) acc[r] = vzero();
    for (int64_t k = start; k < end; ++k) {
      const Vec wk = vload(w + k * LANES);
      for (int r = 0; r < R; ++r) acc[r] = vfma(x[r * width + k], wk, acc[r]);
    }
    for (int r = 0; r < R; ++r) part[r] = vadd(part[r], acc[r]);
    if (end == c.groups[group]) {
      for (int r = 0; r < R; ++r) total[r] = vadd(total[r], part[r]), part[r] = vzero();
      ++group;
    }
    start = end;
  }
  for (int r = 0; r < R; ++r) vstore(out + r * out_stride, total[r]);
}

using TileFn = void (*)(const float*, int64_t, const float*, const Chunking&, float*, int64_t);
static const TileFn TILE_FNS[9] = {nullptr, tile_rows<1>, tile_rows<2>, tile_rows<3>, tile_rows<4>,
                                   tile_rows<5>, tile_rows<6>, tile_rows<7>, tile_rows<8>};

// Logits of rows x [N, D] against output weights packed as [tiles, D, 16] (the first `vocab` columns).
torch::Tensor chunked_logits(torch::Tensor x, torch::Tensor packed, std::vector<int64_t> ends,
                             std::vector<int64_t> group_ends, int64_t vocab) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be float32 [rows, width]");
  TORCH_CHECK(packed.dim() == 3 && packed.scalar_type() == torch::kFloat32 && packed.is_contiguous(),
              "packed weights must be contiguous float32 [tiles, width, 16]");
  x = x.contiguous();
  const int64_t rows = x.size(0), width = x.size(1), tiles = packed.size(0);
  TORCH_CHECK(packed.size(1) == width && packed.size(2) == LANES, "packed weights do not match the rows' width");
  const Chunking chunks = checked_chunking(std::move(ends), std::move(group_ends), width);
  TORCH_CHECK(vocab <= tiles * LANES, "vocab larger than the packed weights");
  auto out = torch::empty({rows, tiles * LANES}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = packed.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t stride = tiles * LANES;
  at::parallel_for(0, tiles, 8, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        const int64_t count = std::min<int64_t>(8, rows - r0);
        TILE_FNS[count](xp + r0 * width, width, wp + t * width * LANES, chunks, op + r0 * stride + t * LANES, stride);
      }
    }
  });
  return out.narrow(1, 0, vocab);
}

// NB output columns x one group of 16 * V rows (lanes run across rows); the weights are read in their own
// [N, K] layout, each weight broadcast to all rows; same per-chunk chains as tile_rows.
template <int NB, int V>
static void column_rows(const float* xt, int64_t width, const float* w, const Chunking& c, float* out,
                        int64_t rows, int64_t out_stride) {
  Vec total[NB][V], part[NB][V];
  for (int j = 0; j < NB; ++j)
    for (int v = 0; v < V; ++v) total[j][v] = part[j][v] = vzero();
  int64_t start = 0;
  size_t group = 0;
  for (const int64_t end : c.ends) {
    Vec acc[NB][V];
    for (int j = 0; j < NB; ++j)
      for (int v = 0; v < V; ++v) acc[j][v] = vzero();
    for (int64_t k = start; k < end; ++k) {
      Vec xv[V];
      for (int v = 0; v < V; ++v) xv[v] = vload(xt + (k * V + v) * LANES);
      for (int j = 0; j < NB; ++j) {
        const float wk = w[j * width + k];
        for (int v = 0; v < V; ++v) acc[j][v] = vfma(wk, xv[v], acc[j][v]);
      }
    }
    for (int j = 0; j < NB; ++j)
      for (int v = 0; v < V; ++v) part[j][v] = vadd(part[j][v], acc[j][v]);
    if (end == c.groups[group]) {
      for (int j = 0; j < NB; ++j)
        for (int v = 0; v < V; ++v) total[j][v] = vadd(total[j][v], part[j][v]), part[j][v] = vzero();
      ++group;
    }
    start = end;
  }
  float lanes[V * LANES];
  for (int j = 0; j < NB; ++j) {
    for (int v = 0; v < V; ++v) vstore(lanes + v * LANES, total[j][v]);
    for (int64_t r = 0; r < rows; ++r) out[r * out_stride + j] = lanes[r];
  }
}

template <int V>
static void column_block(int nb, const float* xt, int64_t width, const float* w, const Chunking& c, float* out,
                         int64_t rows, int64_t out_stride) {
  switch (nb) {
    case 4: column_rows<4, V>(xt, width, w, c, out, rows, out_stride); break;
    case 3: column_rows<3, V>(xt, width, w, c, out, rows, out_stride); break;
    case 2: column_rows<2, V>(xt, width, w, c, out, rows, out_stride); break;
    default: column_rows<1, V>(xt, width, w, c, out, rows, out_stride); break;
  }
}

// x [M, K] times w [N, K] transposed (nn.Linear without bias), weights in place: no packed copy.
torch::Tensor chunked_linear(torch::Tensor x, torch::Tensor w, std::vector<int64_t> ends,
                             std::vector<int64_t> group_ends) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be float32 [rows, width]");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kFloat32 && w.is_contiguous(),
              "weights must be contiguous float32 [out, width]");
  const int64_t rows = x.size(0), width = x.size(1), outs = w.size(0);
  TORCH_CHECK(w.size(1) == width, "weights do not match the rows' width");
  const Chunking chunks = checked_chunking(std::move(ends), std::move(group_ends), width);
  const int V = rows <= LANES ? 1 : 2;
  const int64_t group = V * LANES, groups = (rows + group - 1) / group;
  x = x.contiguous();
  auto xt = torch::empty({groups, width, group}, x.options());  // rows transposed into lanes, zero padded
  float* xtp = xt.data_ptr<float>();
  const float* xs = x.data_ptr<float>();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < width; ++k)
      for (int64_t r = 0; r < group; ++r) {
        const int64_t row = g * group + r;
        xtp[(g * width + k) * group + r] = row < rows ? xs[row * width + k] : 0.0f;
      }
  auto out = torch::empty({rows, outs}, x.options());
  const float* xp = xtp;
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  constexpr int NB = 4;
  at::parallel_for(0, (outs + NB - 1) / NB, 16, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      const int nb = (int)std::min<int64_t>(NB, outs - c * NB);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t count = std::min<int64_t>(group, rows - g * group);
        const float* xg = xp + g * width * group;
        float* og = op + g * group * outs + c * NB;
        if (V == 1) column_block<1>(nb, xg, width, wp + c * NB * width, chunks, og, count, outs);
        else column_block<2>(nb, xg, width, wp + c * NB * width, chunks, og, count, outs);
      }
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("chunked_logits", &chunked_logits, "logits of chosen rows, chunked sums (x, packed, ends, groups, vocab)");
  m.def("chunked_linear", &chunked_linear, "x @ w.T, chunked sums, weights in place (x, w, ends, groups)");
}
