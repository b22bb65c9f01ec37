"""Triton kernels for the fast and fused engines' denoising step (optional: `pip install .[gpu-kernels]`).

Two tiers, each a `StepKernels` set that `fused.FusedStepOps` installs around a step's forward:
- `EXACT` (tier 1, `DecodeConfig.triton_kernels` on the fast engine): element-wise chains as one kernel each,
  with eager PyTorch's rounding points (triton_impl.py): the RMSNorm's tail after eager's variance
  (`rms_norm`), the rotary embedding (`rotary`), the MLP's SiLU gate (`silu_gate`), the residual add (`add`).
  Bit-identical to the eager formulas on CPU under the Triton interpreter (test/test_triton_kernels.py); on a
  GPU the same must still be shown by test_fast_decoding_cuda.py before `auto` may use them.
- `FUSED` (tier 2, the `fused` engine): a split-KV attention over the static cache that reads the key/value heads
  once for all their query heads (`split_kv_attention`), and a fused argmax + maximum probability over the
  output layer (`argmax_probability`). Not bit-identical; tolerances in the tests, quality by the yardstick.

Triton runs where it compiles (CUDA) or under its CPU interpreter (`TRITON_INTERPRET=1` set before this
module's kernels are first used); without Triton `available()` is False and the engines run as without it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from . import fused

ELEMENTS_PER_PROGRAM = 1024  # element-wise kernels: elements per program
VOCAB_CHUNK = 4096  # argmax_probability: vocabulary columns per program
KEY_TILE = 16  # split_kv_attention: keys per inner tile (tl.dot needs >= 16)
KEY_SPLITS = 8  # split_kv_attention: key ranges per (batch, key/value head), run as separate programs
ENGINES_ON_INTERPRETER = False  # tests set it: the engines then run these kernels on the CPU interpreter


@functools.cache
def _impl() -> ModuleType | None:
    """triton_impl.py, imported on first use (Triton is optional); None without Triton."""
    try:
        from . import triton_impl
    except ImportError:
        return None
    return triton_impl


def available() -> bool:
    """Whether Triton is installed (its kernels then run on CUDA, or anywhere under the interpreter)."""
    return _impl() is not None


def interpreted() -> bool:
    """Whether Triton runs its kernels on the CPU interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _precise() -> bool:
    return not interpreted()  # libdevice's expf / rsqrtf (eager CUDA's); NumPy's under the interpreter


def _launch_options() -> dict[str, Any]:
    return {} if interpreted() else {"enable_fp_fusion": False}  # no a * b + c contracted into one rounding


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3-VL's RMSNorm with eager's bits: the variance from eager's own ops, the rest in one kernel."""
    variance = hidden.to(torch.float32).pow(2).mean(-1, keepdim=True)  # eager's reduction, eager's order
    rows = hidden.reshape(-1, hidden.shape[-1]).contiguous()
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, hidden.dtype), device=hidden.device)
    columns = rows.shape[1]
    _impl().rms_norm_tail[(rows.shape[0],)](  # type: ignore[union-attr]
        rows, variance.reshape(-1).contiguous(), weight.contiguous(), out, columns, eps,
        BLOCK=triton_block(columns), PRECISE=_precise(), **_launch_options(),
    )  # fmt: skip
    return out.view(*hidden.shape[:-1], columns)


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary embedding of queries and keys [B, H, L, D] (any strides) with cos/sin [B, L, D], eager's bits."""
    if unsqueeze_dim != 1 or not (q.dtype == k.dtype == cos.dtype == sin.dtype):
        return fused.rotary(q, k, cos, sin, unsqueeze_dim)  # a layout or type promotion not covered here
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    batch, heads, length, dim = x.shape
    cos, sin = cos.expand(batch, length, dim), sin.expand(batch, length, dim)
    out = torch.empty_like(x)  # eager's element-wise result keeps the input's layout
    _impl().rotary[(batch * heads * length,)](  # type: ignore[union-attr]
        x, cos, sin, out, heads, length, dim, *x.stride(), *cos.stride(), *out.stride(),
        BLOCK=triton_block(dim), **_launch_options(),
    )  # fmt: skip
    return out


def silu_gate(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up with eager's bits (same shapes and dtypes)."""
    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    count = gate.numel()
    _impl().silu_gate[(triton_cdiv(count, ELEMENTS_PER_PROGRAM),)](  # type: ignore[union-attr]
        gate, up, out, count, BLOCK=ELEMENTS_PER_PROGRAM, PRECISE=_precise(), **_launch_options()
    )
    return out


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b (same shapes and dtypes) with eager's bits."""
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    count = a.numel()
    _impl().add[(triton_cdiv(count, ELEMENTS_PER_PROGRAM),)](  # type: ignore[union-attr]
        a, b, out, count, BLOCK=ELEMENTS_PER_PROGRAM, **_launch_options()
    )
    return out


def argmax_probability(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of logits [..., V] the first maximum's index and its softmax probability (float32 inside, in the
    logits dtype out), in two passes of kernels instead of argmax + softmax + gather. Shapes [...] each."""
    vocab = logits.shape[-1]
    rows = logits.reshape(-1, vocab).contiguous()
    count = rows.shape[0]
    chunks = triton_cdiv(vocab, VOCAB_CHUNK)
    device = logits.device
    maxima = torch.empty(count, chunks, dtype=torch.float32, device=device)
    firsts = torch.empty(count, chunks, dtype=torch.int32, device=device)
    sums = torch.empty(count, chunks, dtype=torch.float32, device=device)
    impl = _impl()
    impl.argmax_partial[(count, chunks)](rows, maxima, firsts, sums, vocab, chunks, CHUNK=VOCAB_CHUNK)  # type: ignore[union-attr]
    tokens = torch.empty(count, dtype=torch.int64, device=device)
    probs = torch.empty(count, dtype=logits.dtype, device=device)
    impl.argmax_combine[(count,)](maxima, firsts, sums, tokens, probs, chunks, BLOCK=triton_block(chunks))  # type: ignore[union-attr]
    return tokens.view(logits.shape[:-1]), probs.view(logits.shape[:-1])


def split_kv_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of query heads [B, Hq, L, D] on key/value heads [B, Hk, S, D] under a boolean mask [B, 1, L, S]
    (True = attend): each key/value head's query heads stacked as rows, the keys cut into `KEY_SPLITS` ranges
    run in parallel, their softmax partials merged. Returns [B, L, Hq, D] (transformers' attention layout)."""
    if mask.dtype != torch.bool:  # an additive mask: the eager grouped attention
        return fused.grouped_attention(query, key, value, mask, scale)
    batch, query_heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = query_heads // kv_heads
    rows = triton_block(max(16, groups * length))
    split_size = triton_cdiv(triton_cdiv(keys, KEY_SPLITS), KEY_TILE) * KEY_TILE
    splits = triton_cdiv(keys, split_size)
    device = query.device
    maxima = torch.empty(batch * kv_heads, splits, rows, dtype=torch.float32, device=device)
    sums = torch.empty_like(maxima)
    partial = torch.empty(batch * kv_heads, splits, rows, dim, dtype=torch.float32, device=device)
    query = query.contiguous() if query.stride(-1) != 1 else query
    key = key if key.stride(-1) == 1 else key.contiguous()
    value = value if value.stride(-1) == 1 else value.contiguous()
    allowed = mask.to(torch.int8)
    _impl().attention_partial[(batch * kv_heads, splits)](  # type: ignore[union-attr]
        query, key, value, allowed, maxima, sums, partial,
        kv_heads, groups, length, keys, split_size, scale,
        query.stride(0), query.stride(1), query.stride(2), key.stride(0), key.stride(1), key.stride(2),
        value.stride(0), value.stride(1), value.stride(2), allowed.stride(0), allowed.stride(2), allowed.stride(3),
        ROWS=rows, DIM=dim, TILE=KEY_TILE, SPLITS=splits, WIDE=interpreted() or query.dtype == torch.float32,
    )  # fmt: skip
    top = maxima.amax(1, keepdim=True)
    weights = torch.exp(maxima - top)  # a split that saw no allowed key weighs 0
    total = (sums * weights).sum(1)
    out = (partial * weights[..., None]).sum(1) / total[..., None]
    out = out[:, : groups * length].reshape(batch, query_heads, length, dim)
    return out.to(query.dtype).transpose(1, 2).contiguous()


def triton_block(n: int) -> int:
    """The power of two at or above `n` (Triton block sizes)."""
    return 1 << max(0, (n - 1).bit_length())


def triton_cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


@dataclass(frozen=True)
class StepKernels:
    """Which of a step's chains a Triton set replaces (None: not this set's)."""

    name: str
    rms_norm: Any = None
    rotary: Any = None
    silu_gate: Any = None
    attention: Any = None


EXACT = StepKernels("triton-exact", rms_norm=rms_norm, rotary=rotary, silu_gate=silu_gate)
FUSED = StepKernels("triton-fused", attention=split_kv_attention)
