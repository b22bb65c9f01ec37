"""The fast engine's output layer on CPU: the exact engine's logits, bit for bit, for any subset of rows.

The vocabulary layer (151,936 x D) is most of a CPU denoising step, and MKL's float32 GEMM takes about as long
for 4 rows as for 32 (small row counts use it badly). The fast engine only reads the still-masked rows, but it
must give them the very bits `lm_head` gives them inside the whole block. MKL computes each logit as
consecutive chunks of the hidden dimension, each chunk a fused multiply-add chain started from zero, and adds
the chunk sums in order (on the development CPU: one chunk up to a width of 192, 2 x 128 at 256, chunks of 192
from 384 on). `chunked_logits`, a small C++ kernel, does that arithmetic on the weights packed as
[V / 16, D, 16], one pass over them for up to 8 rows at a time: 3-5x faster than MKL here, for any row count.

Nothing about MKL's chunking is assumed: `ExactRowLogits` probes it once per (block shape, thread count) by
running the exact layer on random rows and keeping the first candidate chunking under which every logit has
the same bits; when none does, or the kernel cannot be built (it needs g++, ninja and AVX-512 or AVX2 with
FMA, and is compiled once per machine by torch's extension builder), it answers None and the caller computes
all rows with `lm_head`, as the exact engine does.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch

LOG = logging.getLogger(__name__)

LANES = 16  # vocabulary columns per packed tile (one AVX-512 register, two AVX2 registers)
PROBE_TILES = 64  # candidate chunkings are tried on the first 64 tiles, the winner then on all of them
CANDIDATE_CHUNK_SIZES = (64, 96, 128, 160, 192, 224, 256, 320, 384, 512)

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


def load_kernel(isa: str | None = None) -> Any | None:
    """The compiled `chunked_logits` for this CPU (or the given ISA), building it on first use; None if it cannot."""
    isa = isa or torch.backends.cpu.get_cpu_capability()
    if isa in _KERNELS:
        return _KERNELS[isa]
    flags = kernel_flags(isa)
    module = None
    if flags is None:
        LOG.info("CPU output-layer kernel: no variant for %s; the fast engine computes all rows on CPU", isa)
    else:
        from torch.utils.cpp_extension import load_inline

        LOG.info("building the CPU output-layer kernel (%s; once per machine, about 30 s)", isa)
        try:
            with _ninja_on_path():
                module = load_inline(
                    name=f"wam_diff2_chunked_logits_{isa.lower()}",
                    cpp_sources=KERNEL_SOURCE,
                    functions=["chunked_logits"],
                    extra_cflags=flags,
                    extra_ldflags=["-fopenmp"],
                )
        except Exception as exc:  # no compiler, no ninja, a failed build: the fast engine keeps going without it
            LOG.warning("CPU output-layer kernel unavailable (%s); the fast engine computes all rows on CPU", exc)
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


class ExactRowLogits:
    """`lm_head`'s float32 logits for chosen rows of a [B, L, D] block, bit for bit (see the module docstring)."""

    def __init__(self, head: torch.nn.Module, isa: str | None = None) -> None:
        self.head = head
        self.isa = isa
        self._packed: tuple[Any, torch.Tensor] | None = None
        self._chunks: dict[tuple[Any, ...], tuple[int, ...] | None] = {}

    def __call__(self, rows: torch.Tensor, block_shape: tuple[int, int]) -> torch.Tensor | None:
        """Logits [N, V] of hidden rows [N, D] taken from a [B, L] block, or None (compute all rows instead)."""
        weight = self.head.weight
        if rows.dtype != torch.float32 or weight.dtype != torch.float32 or rows.device.type != "cpu":
            return None
        if getattr(self.head, "bias", None) is not None:
            return None
        kernel = load_kernel(self.isa)
        if kernel is None:
            return None
        packed = self._packed_weights()
        key = (self._weight_key(), block_shape, torch.get_num_threads())
        if key not in self._chunks:
            self._chunks[key] = self._probe(kernel, packed, block_shape)
        ends = self._chunks[key]
        if ends is None:
            return None
        return kernel.chunked_logits(rows, packed, list(ends), weight.shape[0])

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
        """The chunking under which the kernel reproduces `lm_head` on a [B, L, D] block, or None."""
        vocab, width = self.head.weight.shape
        generator = torch.Generator().manual_seed(0)
        probe = torch.randn(*block_shape, width, generator=generator)
        reference = self.head(probe).reshape(-1, vocab)
        flat = probe.reshape(-1, width)
        head_tiles = packed[:PROBE_TILES]
        columns = min(vocab, head_tiles.shape[0] * LANES)
        for ends in candidate_chunkings(width):
            if not torch.equal(kernel.chunked_logits(flat, head_tiles, list(ends), columns), reference[:, :columns]):
                continue
            if torch.equal(kernel.chunked_logits(flat, packed, list(ends), vocab), reference):
                LOG.info("CPU output-layer kernel matches lm_head for blocks %s with chunks %s", block_shape, ends)
                return ends
        LOG.info("CPU output-layer kernel: no chunking reproduces lm_head for blocks %s; all rows", block_shape)
        return None
