"""The Triton kernels (core/engine/triton_kernels.py) against the eager formulas, on CPU under the Triton interpreter.

Tier 1 (the fast engine's): bit-equality with eager PyTorch in float32 and bfloat16. Tier 2 (the fused engine's):
within stated tolerances. Small shapes keep the interpreter quick. Skipped where Triton is not installed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are first compiled (decorated)
from wam_diff2_ros.core.engine import fused as fused_ops
from wam_diff2_ros.core.engine import triton_kernels

pytestmark = [
    pytest.mark.core,
    pytest.mark.skipif(not triton_kernels.available(), reason="triton is not installed (extra gpu-kernels)"),
]
# on a CUDA machine the kernels run compiled on the GPU against eager CUDA; elsewhere interpreted on the CPU
DEVICE = torch.device("cpu" if triton_kernels.interpreted() else "cuda")

DTYPES = (torch.float32, torch.bfloat16)


def _eager_rms_norm(hidden, weight, eps):
    """transformers' Qwen3-VL text RMSNorm, op for op."""
    input_dtype = hidden.dtype
    wide = hidden.to(torch.float32)
    variance = wide.pow(2).mean(-1, keepdim=True)
    wide = wide * torch.rsqrt(variance + eps)
    return weight * wide.to(input_dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes and bits (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_has_eager_bits(dtype):
    generator = torch.Generator().manual_seed(0)
    hidden = (torch.randn(3, 5, 96, generator=generator) * 4).to(DEVICE, dtype)
    weight = (1 + torch.randn(96, generator=generator) / 3).to(DEVICE, dtype)
    assert _same_bits(triton_kernels.rms_norm(hidden, weight, 1e-6), _eager_rms_norm(hidden, weight, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_has_eager_bits_on_transposed_views(dtype):
    generator = torch.Generator().manual_seed(1)
    batch, length, q_heads, kv_heads, dim = 2, 5, 4, 2, 16
    # as the attention builds them: [B, L, H, D] projections viewed as [B, H, L, D]
    q = torch.randn(batch, length, q_heads, dim, generator=generator).to(DEVICE, dtype).transpose(1, 2)
    k = torch.randn(batch, length, kv_heads, dim, generator=generator).to(DEVICE, dtype).transpose(1, 2)
    angles = torch.randn(batch, length, dim, generator=generator)
    cos, sin = angles.cos().to(DEVICE, dtype), angles.sin().to(DEVICE, dtype)
    got = triton_kernels.rotary(q, k, cos, sin)
    want = fused_ops.rotary(q, k, cos, sin)  # transformers' formula: q * cos + rotate_half(q) * sin
    for ours, eager in zip(got, want, strict=True):
        assert _same_bits(ours, eager)
        assert ours.stride() == eager.stride()  # same layout: later kernels see the same strides


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_gate_and_residual_add_keep_eager_rounding_points(dtype):
    generator = torch.Generator().manual_seed(2)
    gate = (torch.randn(4, 7, 80, generator=generator) * 6).to(DEVICE, dtype)
    up = torch.randn(4, 7, 80, generator=generator).to(DEVICE, dtype)
    assert _same_bits(triton_kernels.add(gate, up), gate + up)
    # silu's exp is the platform's: on CUDA the kernel calls libdevice's expf as eager's CUDA silu does; the
    # interpreter calls NumPy's, which differs from PyTorch's vectorised CPU exp in the last bit of some float32
    # values. So on CPU the formula and its rounding points are checked with NumPy's exp in eager's op order
    if DEVICE.type == "cuda":
        assert _same_bits(triton_kernels.silu_gate(gate, up), torch.nn.functional.silu(gate) * up)
        return
    wide = gate.float()
    exp = torch.from_numpy(np.exp(-wide.numpy()))
    eager_with_numpy_exp = (wide / (1 + exp)).to(DEVICE, dtype) * up
    assert _same_bits(triton_kernels.silu_gate(gate, up), eager_with_numpy_exp)
    if dtype == torch.bfloat16:  # rounded to bfloat16, the exp's last bits vanish here: eager's own silu
        assert _same_bits(triton_kernels.silu_gate(gate, up), torch.nn.functional.silu(gate) * up)


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_probability_matches_argmax_and_softmax(dtype):
    generator = torch.Generator().manual_seed(3)
    logits = (torch.randn(2, 6, 9000, generator=generator) * 3).to(DEVICE, dtype)  # three vocabulary chunks, one short
    logits[0, 1, 8999] = logits[0, 1].max() + 5  # the maximum in the last (short) chunk
    logits[1, 2, 100] = logits[1, 2, 5000] = logits[1, 2].max() + 1  # a tie across chunks: the first wins
    tokens, probs = triton_kernels.argmax_probability(logits)
    assert torch.equal(tokens, logits.argmax(-1))
    want = torch.softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    # tolerance: float32 softmax sums in another order (1e-6 relative); bfloat16 rounds once (1 ulp = 2^-8)
    assert probs.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float32 else 2**-7
    assert torch.allclose(probs.float(), want.float(), rtol=tolerance, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_kv_attention_matches_masked_attention(dtype):
    generator = torch.Generator().manual_seed(4)
    batch, q_heads, kv_heads, length, keys, dim = 2, 4, 2, 5, 70, 16
    query = torch.randn(batch, length, q_heads, dim, generator=generator).to(DEVICE, dtype).transpose(1, 2)
    key = torch.randn(batch, kv_heads, keys, dim, generator=generator).to(DEVICE, dtype)
    value = torch.randn(batch, kv_heads, keys, dim, generator=generator).to(DEVICE, dtype)
    used = torch.arange(keys, device=DEVICE) < 53  # the static cache's used slots; the rest never attended
    mask = used.view(1, 1, 1, -1).expand(batch, 1, length, keys).clone()
    mask[1, 0, :, :4] = False  # left padding of the second prompt
    got = triton_kernels.split_kv_attention(query, key, value, mask, dim**-0.5)
    repeat = q_heads // kv_heads
    want = torch.nn.functional.scaled_dot_product_attention(
        query.float(), key.float().repeat_interleave(repeat, 1), value.float().repeat_interleave(repeat, 1),
        attn_mask=mask, scale=dim**-0.5,
    ).transpose(1, 2)  # fmt: skip
    assert got.shape == (batch, length, q_heads, dim) and got.dtype == dtype
    # tolerance: float32 products and softmax in another order; bfloat16: probabilities rounded before P @ V
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(got.float(), want, rtol=tolerance, atol=tolerance)


@pytest.fixture(scope="module")
def tiny_backbone():
    from core_helpers import tiny_checkpoint

    from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
    from wam_diff2_ros.core.model import BlockDiffusionBackbone

    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    model = load_model(info, torch.device("cpu"), torch.float32)
    return BlockDiffusionBackbone(model), load_processor(info)


@pytest.mark.skipif(DEVICE.type == "cuda", reason="the engines' CUDA wiring is test_fast_decoding_cuda.py's")
def test_engines_route_their_steps_through_the_kernels(tiny_backbone, monkeypatch):
    """Wiring, on CPU under the interpreter: the fast engine with `triton_kernels` runs the tier-1 kernels (its
    tokens: the exact engine's on this model), the fused engine the split-KV attention and fused argmax."""
    from core_helpers import noise_image

    from wam_diff2_ros.core.engine.decoding import DecodeConfig, block_diffusion_decode
    from wam_diff2_ros.core.prompts import build_messages

    backbone, processor = tiny_backbone
    monkeypatch.setattr(triton_kernels, "ENGINES_ON_INTERPRETER", True)
    monkeypatch.setattr(fused_ops.torch, "compile", lambda function, **_: function)  # chains eager: quick
    calls: dict[str, int] = {}
    for name in ("rms_norm", "rotary", "silu_gate", "split_kv_attention", "argmax_probability"):
        kernel = getattr(triton_kernels, name)

        def counted(*args, _kernel=kernel, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _kernel(*args, **kwargs)

        monkeypatch.setattr(triton_kernels, name, counted)
    monkeypatch.setattr(triton_kernels, "EXACT", triton_kernels.StepKernels(
        "triton-exact", rms_norm=triton_kernels.rms_norm, rotary=triton_kernels.rotary,
        silu_gate=triton_kernels.silu_gate,
    ))  # fmt: skip
    monkeypatch.setattr(triton_kernels, "FUSED", triton_kernels.StepKernels(
        "triton-fused", attention=triton_kernels.split_kv_attention
    ))  # fmt: skip
    chat = [build_messages("Front view: <image>\nThe navigation information is: left", [noise_image(64, 64)])]
    inputs = processor(chat, padding_side="left")
    config = DecodeConfig(max_new_tokens=8, block_size=8, denoising_steps=4)

    def decode(**overrides):
        return block_diffusion_decode(
            backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw,
            config.with_overrides(**overrides),
        )  # fmt: skip

    exact = decode(engine="exact")
    tier1 = decode(engine="fast", triton_kernels=True)
    assert {"rms_norm", "rotary", "silu_gate"} <= set(calls) and "split_kv_attention" not in calls
    assert tier1.sequences.tolist() == exact.sequences.tolist()
    calls.clear()
    fused = decode(engine="fused")
    assert calls.get("split_kv_attention", 0) > 0 and "rms_norm" not in calls
    assert fused.sequences.shape == exact.sequences.shape
