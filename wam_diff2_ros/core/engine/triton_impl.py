"""The Triton kernels of triton_kernels.py (imported only where Triton is installed; see that module).

Tier 1 kernels keep eager PyTorch's rounding points: every operation eager runs as its own kernel rounds its
result to the tensor dtype here too (products of two values of the tensor dtype are exact in float32, so one
rounding per eager op), nothing is contracted into a fused multiply-add, and no reduction is reordered (the
RMSNorm's variance comes from eager). `PRECISE` selects CUDA's libdevice `expf` / `rsqrtf` (what eager's CUDA
kernels call); under the interpreter NumPy's functions stand in.
"""

# ruff: noqa: N803, SIM108  (Triton: upper-case compile-time parameters; if-blocks on them are resolved when compiling)
from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def rounded(wide, dtype: tl.constexpr):
    """float32 `wide` rounded to `dtype` to nearest, ties to even, as PyTorch rounds (bfloat16 by its bits: the
    interpreter's own bfloat16 cast truncates)."""
    if dtype == tl.bfloat16:
        bits = wide.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        nearest = ((bits >> 16) << 16).to(tl.float32, bitcast=True)
        return tl.where(wide != wide, wide, nearest).to(tl.bfloat16)  # exact: the low bits are zero
    else:
        return wide.to(dtype)


@triton.jit
def rms_norm_tail(x_ptr, var_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr, PRECISE: tl.constexpr):
    """One row: out = weight * (x.float() * rsqrt(variance + eps)).to(x dtype), rounded as eager rounds."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=keep, other=0.0)
    variance = tl.load(var_ptr + row)
    if PRECISE:
        scale = libdevice.rsqrt(variance + eps)
    else:
        scale = tl.rsqrt(variance + eps)
    normed = rounded(x.to(tl.float32) * scale, x.dtype)
    weight = tl.load(w_ptr + cols, mask=keep, other=0.0)
    out = weight.to(tl.float32) * normed.to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, rounded(out, out_ptr.dtype.element_ty), mask=keep)


@triton.jit
def rotary(
    x_ptr, cos_ptr, sin_ptr, out_ptr, heads, length, dim,
    sxb, sxh, sxl, sxd, scb, scl, scd, sob, soh, sol, sod,
    BLOCK: tl.constexpr,
):  # fmt: skip
    """One (batch, head, position) row: out = x * cos + rotate_half(x) * sin, each product and the sum rounded."""
    pid = tl.program_id(0)
    pos = pid % length
    head = (pid // length) % heads
    batch = pid // (length * heads)
    d = tl.arange(0, BLOCK)
    keep = d < dim
    half = dim // 2
    partner = tl.where(d < half, d + half, d - half)
    base = x_ptr + batch * sxb + head * sxh + pos * sxl
    x = tl.load(base + d * sxd, mask=keep, other=0.0)
    other = tl.load(base + partner * sxd, mask=keep, other=0.0)
    rotated = tl.where(d < half, -other.to(tl.float32), other.to(tl.float32))  # negation is exact
    trig = batch * scb + pos * scl + d * scd
    cos = tl.load(cos_ptr + trig, mask=keep, other=0.0)
    sin = tl.load(sin_ptr + trig, mask=keep, other=0.0)
    first = rounded(x.to(tl.float32) * cos.to(tl.float32), x.dtype)
    second = rounded(rotated * sin.to(tl.float32), x.dtype)
    out = rounded(first.to(tl.float32) + second.to(tl.float32), x.dtype)
    tl.store(out_ptr + batch * sob + head * soh + pos * sol + d * sod, out, mask=keep)


@triton.jit
def silu_gate(gate_ptr, up_ptr, out_ptr, count, BLOCK: tl.constexpr, PRECISE: tl.constexpr):
    """out = silu(gate) * up: silu as eager computes it (x / (1 + exp(-x)) in float32), rounded, then the product."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offsets < count
    gate = tl.load(gate_ptr + offsets, mask=keep, other=0.0)
    up = tl.load(up_ptr + offsets, mask=keep, other=0.0)
    wide = gate.to(tl.float32)
    if PRECISE:
        activated = rounded(libdevice.div_rn(wide, 1.0 + libdevice.exp(-wide)), gate.dtype)
    else:
        activated = rounded(wide / (1.0 + tl.exp(-wide)), gate.dtype)
    out = rounded(activated.to(tl.float32) * up.to(tl.float32), gate.dtype)
    tl.store(out_ptr + offsets, out, mask=keep)


@triton.jit
def add(a_ptr, b_ptr, out_ptr, count, BLOCK: tl.constexpr):
    """out = a + b (the residual add), rounded once to the tensor dtype as eager rounds it."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offsets < count
    a = tl.load(a_ptr + offsets, mask=keep, other=0.0)
    b = tl.load(b_ptr + offsets, mask=keep, other=0.0)
    tl.store(out_ptr + offsets, rounded(a.to(tl.float32) + b.to(tl.float32), a.dtype), mask=keep)


@triton.jit
def argmax_partial(
    logits_ptr, max_ptr, index_ptr, sum_ptr, vocab, chunks, CHUNK: tl.constexpr
):  # fmt: skip
    """One (row, vocabulary chunk): the chunk's maximum, its first index, and sum(exp(logit - chunk maximum))."""
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    keep = cols < vocab
    x = tl.load(logits_ptr + row * vocab + cols, mask=keep, other=-float("inf")).to(tl.float32)
    top = tl.max(x, axis=0)
    first = tl.min(tl.where(x == top, cols, vocab), axis=0)
    total = tl.sum(tl.where(keep, tl.exp(x - top), 0.0), axis=0)
    tl.store(max_ptr + row * chunks + chunk, top)
    tl.store(index_ptr + row * chunks + chunk, first)
    tl.store(sum_ptr + row * chunks + chunk, total)


@triton.jit
def argmax_combine(max_ptr, index_ptr, sum_ptr, token_ptr, prob_ptr, chunks, BLOCK: tl.constexpr):
    """One row: the first chunk holding the row's maximum gives the token; probability 1 / sum(exp(l - max))."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    keep = c < chunks
    maxima = tl.load(max_ptr + row * chunks + c, mask=keep, other=-float("inf"))
    firsts = tl.load(index_ptr + row * chunks + c, mask=keep, other=2**31 - 1)
    sums = tl.load(sum_ptr + row * chunks + c, mask=keep, other=0.0)
    top = tl.max(maxima, axis=0)
    token = tl.min(tl.where(maxima == top, firsts, 2**31 - 1), axis=0)
    total = tl.sum(tl.where(keep, sums * tl.exp(maxima - top), 0.0), axis=0)
    tl.store(token_ptr + row, token.to(tl.int64))
    tl.store(prob_ptr + row, rounded(1.0 / total, prob_ptr.dtype.element_ty))


@triton.jit
def attention_partial(
    q_ptr, k_ptr, v_ptr, mask_ptr, m_ptr, l_ptr, acc_ptr,
    kv_heads, groups, length, keys, split_size, scale,
    sqb, sqh, sql, skb, skh, sks, svb, svh, svs, smb, sml, sms,
    ROWS: tl.constexpr, DIM: tl.constexpr, TILE: tl.constexpr, SPLITS: tl.constexpr, WIDE: tl.constexpr,
):  # fmt: skip
    """One (batch x key/value head, key split): the head's query rows (its `groups` query heads x `length`
    positions, stacked) against the split's keys under the boolean mask; online softmax in float32. Writes the
    split's row maxima, sums and unnormalised outputs, merged by the caller. `WIDE`: products in float32 (IEEE;
    float32 inputs, and the interpreter, whose products cannot take bfloat16), else in the inputs' dtype with
    float32 accumulation (tensor cores)."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    batch = pid // kv_heads
    kv_head = pid % kv_heads
    r = tl.arange(0, ROWS)
    row_ok = r < groups * length
    head = kv_head * groups + r // length
    pos = r % length
    d = tl.arange(0, DIM)
    q = tl.load(
        q_ptr + batch * sqb + head[:, None] * sqh + pos[:, None] * sql + d[None, :], mask=row_ok[:, None], other=0.0
    )
    m = tl.full((ROWS,), -float("inf"), tl.float32)
    s = tl.zeros((ROWS,), tl.float32)
    acc = tl.zeros((ROWS, DIM), tl.float32)
    start = split * split_size
    for offset in range(0, split_size, TILE):
        n = start + offset + tl.arange(0, TILE)
        n_ok = (n < keys) & (n < start + split_size)
        k = tl.load(k_ptr + batch * skb + kv_head * skh + n[:, None] * sks + d[None, :], mask=n_ok[:, None], other=0.0)
        v = tl.load(v_ptr + batch * svb + kv_head * svh + n[:, None] * svs + d[None, :], mask=n_ok[:, None], other=0.0)
        allowed = tl.load(
            mask_ptr + batch * smb + pos[:, None] * sml + n[None, :] * sms,
            mask=row_ok[:, None] & n_ok[None, :],
            other=0,
        )
        if WIDE:
            scores = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee") * scale
        else:
            scores = tl.dot(q, tl.trans(k), out_dtype=tl.float32) * scale
        scores = tl.where(allowed != 0, scores, -float("inf"))
        new_m = tl.maximum(m, tl.max(scores, axis=1))
        safe_m = tl.where(new_m == -float("inf"), 0.0, new_m)
        p = tl.exp(scores - safe_m[:, None])
        correction = tl.exp(m - safe_m)
        s = s * correction + tl.sum(p, axis=1)
        if WIDE:
            weighted = tl.dot(rounded(p, v.dtype).to(tl.float32), v.to(tl.float32), input_precision="ieee")
        else:
            weighted = tl.dot(p.to(v.dtype), v, out_dtype=tl.float32)
        acc = acc * correction[:, None] + weighted
        m = new_m
    at = (pid * SPLITS + split) * ROWS + r
    tl.store(m_ptr + at, m)
    tl.store(l_ptr + at, s)
    tl.store(acc_ptr + at[:, None] * DIM + d[None, :], acc)
