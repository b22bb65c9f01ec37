"""The fast engine's CPU kernels: float32 matrix products with the exact engine's bits, at memory speed.

On CPU a denoising step is almost all matrix products with few rows (one block: 32 per sample), where MKL's
float32 GEMM is slow (as long for 4 rows of the 151,936-token output layer as for 32). Both engines must get
the same bits, so the kernels reproduce MKL's arithmetic: each output is summed over consecutive chunks of the
input width, each chunk a fused multiply-add chain started from zero, the chunk sums added in order (on the
development CPU: one chunk up to a width of 192, 2 x 128 at 256, chunks of 192 from 384 on). Two kernels:

- `chunked_logits`: the output layer on any subset of a block's rows (the still-masked ones), on the weights
  packed as [V / 16, D, 16] tiles (`ExactRowLogits`; one more copy of the output layer's weights).
- `chunked_linear`: the text layers' projections on a whole block, vector lanes across the rows, the weights
  read in place (`ExactLinears`, installed around the fast engine's step and commit forwards).

Nothing about MKL's chunking is assumed: each (weight shape, block shape, thread count) is probed once by
running the stock layer on random rows and keeping the first candidate chunking under which every output has
the same bits; where none does, or the kernels cannot be built (they need g++, ninja and AVX-512 or AVX2 with
FMA, and are compiled once per machine by torch's extension builder), the stock modules run, as in the exact
engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

LOG = logging.getLogger(__name__)

LANES = 16  # vocabulary columns per packed tile (one AVX-512 register, two AVX2 registers)
PROBE_TILES = 64  # candidate chunkings are tried on the first 64 tiles (1024 logits), then on all of them
PROBE_COLUMNS = 64  # and on the first 64 outputs of a linear layer
CANDIDATE_CHUNK_SIZES = (64, 96, 128, 160, 192, 224, 256, 320, 384, 512)
KERNEL_NAME = "wam_diff2_cpu_kernels"  # the compiled module is KERNEL_NAME_<isa>
TORCH_BUILD_LOCK = "lock"  # the file torch's extension builder holds in a build directory while it builds

KERNEL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

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

// R rows x one tile of 16 columns: per chunk a fused multiply-add chain from zero, chunk sums added in order.
template <int R>
static void tile_rows(const float* x, int64_t width, const float* w, const std::vector<int64_t>& ends,
                      float* out, int64_t out_stride) {
  Vec total[R];
  for (int r = 0; r < R; ++r) total[r] = vzero();
  int64_t start = 0;
  for (const int64_t end : ends) {
    Vec acc[R];
    for (int r = 0; r < R; ++r) acc[r] = vzero();
    for (int64_t k = start; k < end; ++k) {
      const Vec wk = vload(w + k * LANES);
      for (int r = 0; r < R; ++r) acc[r] = vfma(x[r * width + k], wk, acc[r]);
    }
    for (int r = 0; r < R; ++r) total[r] = vadd(total[r], acc[r]);
    start = end;
  }
  for (int r = 0; r < R; ++r) vstore(out + r * out_stride, total[r]);
}

using TileFn = void (*)(const float*, int64_t, const float*, const std::vector<int64_t>&, float*, int64_t);
static const TileFn TILE_FNS[9] = {nullptr, tile_rows<1>, tile_rows<2>, tile_rows<3>, tile_rows<4>,
                                   tile_rows<5>, tile_rows<6>, tile_rows<7>, tile_rows<8>};

torch::Tensor chunked_logits(torch::Tensor x, torch::Tensor packed, std::vector<int64_t> ends, int64_t vocab) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be float32 [rows, width]");
  TORCH_CHECK(packed.dim() == 3 && packed.scalar_type() == torch::kFloat32 && packed.is_contiguous(),
              "packed weights must be contiguous float32 [tiles, width, 16]");
  x = x.contiguous();
  const int64_t rows = x.size(0), width = x.size(1), tiles = packed.size(0);
  TORCH_CHECK(packed.size(1) == width && packed.size(2) == LANES, "packed weights do not match the rows' width");
  TORCH_CHECK(!ends.empty() && ends.back() == width, "chunks must end at the width");
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
        TILE_FNS[count](xp + r0 * width, width, wp + t * width * LANES, ends, op + r0 * stride + t * LANES, stride);
      }
    }
  });
  return out.narrow(1, 0, vocab);
}

// NB output columns x one group of 16 * V rows (lanes run across rows); the weights are read in their own
// [N, K] layout, each weight broadcast to all rows; same per-chunk chains as tile_rows.
template <int NB, int V>
static void column_rows(const float* xt, int64_t width, const float* w, const std::vector<int64_t>& ends,
                        float* out, int64_t rows, int64_t out_stride) {
  Vec total[NB][V];
  for (int j = 0; j < NB; ++j)
    for (int v = 0; v < V; ++v) total[j][v] = vzero();
  int64_t start = 0;
  for (const int64_t end : ends) {
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
      for (int v = 0; v < V; ++v) total[j][v] = vadd(total[j][v], acc[j][v]);
    start = end;
  }
  float lanes[V * LANES];
  for (int j = 0; j < NB; ++j) {
    for (int v = 0; v < V; ++v) vstore(lanes + v * LANES, total[j][v]);
    for (int64_t r = 0; r < rows; ++r) out[r * out_stride + j] = lanes[r];
  }
}

template <int V>
static void column_block(int nb, const float* xt, int64_t width, const float* w, const std::vector<int64_t>& ends,
                         float* out, int64_t rows, int64_t out_stride) {
  switch (nb) {
    case 4: column_rows<4, V>(xt, width, w, ends, out, rows, out_stride); break;
    case 3: column_rows<3, V>(xt, width, w, ends, out, rows, out_stride); break;
    case 2: column_rows<2, V>(xt, width, w, ends, out, rows, out_stride); break;
    default: column_rows<1, V>(xt, width, w, ends, out, rows, out_stride); break;
  }
}

// x [M, K] times w [N, K] transposed (nn.Linear without bias), weights in place: no packed copy.
torch::Tensor chunked_linear(torch::Tensor x, torch::Tensor w, std::vector<int64_t> ends) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be float32 [rows, width]");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kFloat32 && w.is_contiguous(),
              "weights must be contiguous float32 [out, width]");
  const int64_t rows = x.size(0), width = x.size(1), outs = w.size(0);
  TORCH_CHECK(w.size(1) == width, "weights do not match the rows' width");
  TORCH_CHECK(!ends.empty() && ends.back() == width, "chunks must end at the width");
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
        if (V == 1) column_block<1>(nb, xg, width, wp + c * NB * width, ends, og, count, outs);
        else column_block<2>(nb, xg, width, wp + c * NB * width, ends, og, count, outs);
      }
    }
  });
  return out;
}
"""

_KERNELS: dict[str, Any] = {}  # ISA -> compiled module, or None when it could not be built


def kernel_flags(isa: str) -> list[str] | None:
    """Compiler flags for one of torch's CPU capabilities, or None where the kernel has no variant."""
    return {
        "AVX512": ["-O3", "-mavx512f", "-mfma", "-DWAM_AVX512", "-fopenmp"],
        "AVX2": ["-O3", "-mavx2", "-mfma", "-fopenmp"],
    }.get(isa)


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """torch's extension builder runs `ninja` from PATH; the PyPI ninja lives next to the interpreter."""
    try:
        import ninja

        bin_dir = ninja.BIN_DIR
    except (ImportError, AttributeError):
        yield
        return
    previous = os.environ.get("PATH", "")
    os.environ["PATH"] = bin_dir + os.pathsep + previous
    try:
        yield
    finally:
        os.environ["PATH"] = previous


def build_directory(isa: str) -> str:
    """Where the kernels for `isa` are compiled and cached (under torch's extension root, per Python version)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    return os.path.join(root, f"py{sys.version_info.major}{sys.version_info.minor}_cpu", f"{KERNEL_NAME}_{isa.lower()}")


@contextlib.contextmanager
def _exclusive_build(directory: str) -> Iterator[None]:
    """Hold an OS lock on a build directory while building in it. The OS releases it when its process dies, unlike
    the `lock` file torch's builder leaves behind when a build is killed (a crash, SIGKILL, power loss), which would
    make every later build wait for it forever. Every build of these kernels takes this lock first, so a `lock`
    file found while holding it is such a leftover and is removed."""
    os.makedirs(directory, exist_ok=True)
    with open(directory + ".build-lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            leftover = os.path.join(directory, TORCH_BUILD_LOCK)
            if os.path.exists(leftover):
                LOG.warning("removing %s, left by a kernel build that was killed", leftover)
                os.remove(leftover)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_kernel(isa: str | None = None) -> Any | None:
    """The compiled kernels for this CPU (or the given ISA), built on first use; None where they cannot be."""
    isa = isa or torch.backends.cpu.get_cpu_capability()
    if isa in _KERNELS:
        return _KERNELS[isa]
    flags = kernel_flags(isa)
    module = None
    if flags is None:
        LOG.info("no CPU kernels for %s: the fast engine runs the stock layers on CPU", isa)
    else:
        from torch.utils.cpp_extension import load_inline

        LOG.info("building the fast engine's CPU kernels (%s; once per machine, about 30 s)", isa)
        try:
            directory = build_directory(isa)
            with _ninja_on_path(), _exclusive_build(directory):
                module = load_inline(
                    name=f"{KERNEL_NAME}_{isa.lower()}",
                    cpp_sources=KERNEL_SOURCE,
                    functions=["chunked_logits", "chunked_linear"],
                    extra_cflags=flags,
                    extra_ldflags=["-fopenmp"],
                    build_directory=directory,
                )
        except Exception as exc:  # no compiler, no ninja, a failed build: the fast engine keeps going without it
            LOG.warning("CPU kernels unavailable (%s): the fast engine runs the stock layers on CPU", exc)
    _KERNELS[isa] = module
    return module


def pack_weights(weight: torch.Tensor) -> torch.Tensor:
    """[V, D] output weights as [ceil(V / 16), D, 16] tiles (zero columns pad the last tile)."""
    vocab, width = weight.shape
    tiles = -(-vocab // LANES)
    if tiles * LANES != vocab:
        weight = torch.nn.functional.pad(weight, (0, 0, 0, tiles * LANES - vocab))
    return weight.reshape(tiles, LANES, width).transpose(1, 2).contiguous()


def candidate_chunkings(width: int) -> list[tuple[int, ...]]:
    """Chunk ends to try, most likely first: one chunk, fixed sizes (a shorter last chunk), even splits."""
    found: list[tuple[int, ...]] = [(width,)]
    sizes = [size for size in CANDIDATE_CHUNK_SIZES if size < width]
    sizes += [-(-width // parts) for parts in range(2, 9)]
    for size in sizes:
        ends = (*range(size, width, size), width)
        if ends not in found:
            found.append(ends)
    return found


def find_chunking(
    run: Callable[[list[int], bool], torch.Tensor], reference: torch.Tensor, width: int
) -> tuple[int, ...] | None:
    """The first candidate chunking under which `run(ends, full)` equals `reference` bit for bit: each is tried
    on a slice of the outputs first (`full=False`, compared with the same leading columns), then on all."""
    for ends in candidate_chunkings(width):
        head = run(list(ends), False)
        if torch.equal(head, reference[:, : head.shape[1]]) and torch.equal(run(list(ends), True), reference):
            return ends
    return None


class ExactRowLogits:
    """`lm_head`'s float32 logits for chosen rows of a [B, L, D] block, bit for bit (see the module docstring)."""

    def __init__(self, head: torch.nn.Module, isa: str | None = None) -> None:
        self.head = head
        self.isa = isa
        self._packed: tuple[Any, torch.Tensor] | None = None
        self._chunks: dict[tuple[Any, ...], tuple[int, ...] | None] = {}

    def __call__(self, rows: torch.Tensor, block_shape: tuple[int, int]) -> torch.Tensor | None:
        """Logits [N, V] of hidden rows [N, D] taken from a [B, L] block, or None (compute all rows instead)."""
        if not (_covered(self.head) and rows.dtype == torch.float32 and rows.device.type == "cpu"):
            return None
        kernel = load_kernel(self.isa)
        if kernel is None:
            return None
        packed = self._packed_weights()
        key = (tuple(packed.shape), block_shape, torch.get_num_threads())  # the chunking follows shapes, not values
        if key not in self._chunks:
            self._chunks[key] = self._probe(kernel, packed, block_shape)
        ends = self._chunks[key]
        if ends is None:
            return None
        return kernel.chunked_logits(rows, packed, list(ends), self.head.weight.shape[0])

    def _weight_key(self) -> tuple[Any, ...]:
        weight = self.head.weight
        return (weight.data_ptr(), weight._version, tuple(weight.shape))

    def _packed_weights(self) -> torch.Tensor:
        key = self._weight_key()
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, pack_weights(self.head.weight.detach()))
        return self._packed[1]

    @torch.no_grad()
    def _probe(self, kernel: Any, packed: torch.Tensor, block_shape: tuple[int, int]) -> tuple[int, ...] | None:
        vocab, width = self.head.weight.shape
        probe = _probe_block(block_shape, width)
        reference = self.head(probe).reshape(-1, vocab)
        flat = probe.reshape(-1, width)

        def run(ends: list[int], full: bool) -> torch.Tensor:
            tiles = packed if full else packed[:PROBE_TILES]
            return kernel.chunked_logits(flat, tiles, ends, vocab if full else min(vocab, tiles.shape[0] * LANES))

        ends = find_chunking(run, reference, width)
        LOG.info("CPU output-layer kernel for blocks %s: chunks %s", block_shape, ends or "none match, all rows")
        return ends


class ExactLinears:
    """The text layers' projections (`nn.Linear`, float32, no bias) on a block's rows, bit for bit as in the
    exact engine, through `chunked_linear` (weights read in place). `installed(block_shape)` routes the given
    modules through the kernel for the forwards inside it, each weight shape after a probe like the output
    layer's; shapes the kernel cannot reproduce keep their stock forward."""

    def __init__(self, modules: list[torch.nn.Module], isa: str | None = None) -> None:
        self.modules = [module for module in modules if isinstance(module, torch.nn.Linear)]
        self.isa = isa
        self._chunks: dict[tuple[Any, ...], tuple[int, ...] | None] = {}

    @contextlib.contextmanager
    def installed(self, block_shape: tuple[int, int]) -> Iterator[None]:
        """Within: every covered module with a matching chunking computes [B, L, K] inputs with the kernel."""
        kernel = load_kernel(self.isa)
        routed = []
        if kernel is not None:
            for module in self.modules:
                ends = self._chunking(kernel, module, block_shape) if _covered(module) else None
                if ends is not None:
                    module.forward = functools.partial(_kernel_forward, kernel, module, list(ends), block_shape)
                    routed.append(module)
        try:
            yield
        finally:
            for module in routed:
                del module.forward

    def _chunking(self, kernel: Any, module: torch.nn.Linear, block_shape: tuple[int, int]) -> tuple[int, ...] | None:
        outs, width = module.weight.shape
        key = (outs, width, block_shape, torch.get_num_threads())
        if key not in self._chunks:
            with torch.no_grad():
                probe = _probe_block(block_shape, width)
                weight = module.weight.detach()
                reference = torch.nn.functional.linear(probe, weight).reshape(-1, outs)
                flat = probe.reshape(-1, width)

                def run(ends: list[int], full: bool) -> torch.Tensor:
                    return kernel.chunked_linear(flat, weight if full else weight[:PROBE_COLUMNS], ends)

                self._chunks[key] = find_chunking(run, reference, width)
            LOG.info("CPU linear kernel %d -> %d for blocks %s: chunks %s", width, outs, block_shape, self._chunks[key])
        return self._chunks[key]


def _probe_block(block_shape: tuple[int, int], width: int) -> torch.Tensor:
    """The random [B, L, width] rows a chunking is probed on (fixed seed: the same probe every time)."""
    return torch.randn(*block_shape, width, generator=torch.Generator().manual_seed(0))


def _covered(module: torch.nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (
        weight is not None
        and weight.dtype == torch.float32
        and weight.device.type == "cpu"
        and weight.dim() == 2
        and weight.is_contiguous()
        and getattr(module, "bias", None) is None
    )


def _kernel_forward(
    kernel: Any, module: torch.nn.Linear, ends: list[int], block_shape: tuple[int, int], x: torch.Tensor
) -> torch.Tensor:
    if tuple(x.shape[:-1]) != block_shape or x.dtype != torch.float32:  # not a block's rows: the stock forward
        return torch.nn.functional.linear(x, module.weight)
    with torch.no_grad():
        flat = kernel.chunked_linear(x.reshape(-1, x.shape[-1]), module.weight, ends)
    return flat.view(*block_shape, -1)
