"""The fast engine's opt-in fused kernels (core/engine/fused.py): the stock chains' values, installed and removed.

torch.compile runs here on CPU (inductor's C++ backend) on real transformers Qwen3-VL modules; on CUDA the
same chains become Triton kernels (scripts/bench_gpu.sh measures them). Fused kernels are not bit-identical,
so values are compared with a float32 tolerance and the decoder's tokens are not asserted equal.
"""

from __future__ import annotations

import logging
import threading

import pytest
import torch
from core_helpers import tiny_checkpoint
from test_fast_decoding import inputs_for, tiny_conversations

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine import fused as fused_ops
from wam_diff2_ros.core.engine.decoding import DecodeConfig, block_diffusion_decode
from wam_diff2_ros.core.engine.fast import FastRunner
from wam_diff2_ros.core.engine.fused import ROTARY_FUNCTION, FusedStepOps
from wam_diff2_ros.core.engine.selection import Runners
from wam_diff2_ros.core.model import BlockDiffusionBackbone

pytestmark = pytest.mark.core


@pytest.fixture(scope="module")
def tiny():
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    model = load_model(info, torch.device("cpu"), torch.float32)
    return BlockDiffusionBackbone(model), load_processor(info)


def language_model(backbone):
    return backbone.model.model.language_model


def test_compiled_chains_compute_what_the_stock_modules_compute(tiny):
    backbone, _ = tiny
    ops = FusedStepOps(language_model(backbone))
    layer = language_model(backbone).layers[0]
    attention = layer.self_attn
    head_dim = attention.q_norm.weight.shape[0]
    hidden = torch.randn(2, 7, layer.input_layernorm.weight.shape[0])
    heads = torch.randn(2, 7, 4, head_dim)
    q, k = torch.randn(2, 4, 7, head_dim), torch.randn(2, 2, 7, head_dim)
    cos, sin = torch.randn(2, 7, head_dim), torch.randn(2, 7, head_dim)
    # attention of 7 block rows on 19 cached slots (2 query heads per key/value head), some slots masked
    keys, values = torch.randn(2, 2, 19, head_dim), torch.randn(2, 2, 19, head_dim)
    mask = torch.rand(2, 1, 7, 19) < 0.7
    mask[..., 12:] = True  # every row sees something
    stock_rotary = getattr(ops.rotary_home, ROTARY_FUNCTION)
    functions = ops.attention_functions

    def attend():
        out, _ = functions[fused_ops.ATTENTION](attention, q, keys, values, mask, scaling=attention.scaling)
        return out

    with torch.inference_mode():
        expected = (
            layer.input_layernorm(hidden), attention.q_norm(heads), layer.mlp(hidden), *stock_rotary(q, k, cos, sin),
            attend(),
        )  # fmt: skip
        with ops.installed():
            got = (
                layer.input_layernorm(hidden),
                attention.q_norm(heads),
                layer.mlp(hidden),
                *getattr(ops.rotary_home, ROTARY_FUNCTION)(q, k, cos, sin),
                attend(),
            )
    assert not ops.failed and set(ops.compiled) == {"rms_norm", "silu_gate", "rotary", "grouped_attention"}
    for want, have in zip(expected, got, strict=True):
        assert have.shape == want.shape and have.dtype == want.dtype
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-5)
    # and not by accident: a different input gives a different output
    with ops.installed():
        assert not torch.allclose(layer.input_layernorm(hidden + 1), expected[0])


def test_installed_routes_every_norm_and_mlp_and_restores_the_stock_modules(tiny):
    backbone, _ = tiny
    model = language_model(backbone)
    ops = FusedStepOps(model)
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    mlps = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
    assert len(ops.norms) == len(norms) == 4 * len(model.layers) + 1 and len(ops.mlps) == len(mlps) == len(model.layers)
    stock_rotary = getattr(ops.rotary_home, ROTARY_FUNCTION)
    functions = ops.attention_functions
    stock_attention = functions[fused_ops.ATTENTION]
    with ops.installed():
        assert all("forward" in vars(m) for m in norms + mlps)
        assert getattr(ops.rotary_home, ROTARY_FUNCTION) is not stock_rotary
        assert functions[fused_ops.ATTENTION] is not stock_attention
    assert not any("forward" in vars(m) for m in norms + mlps)
    assert getattr(ops.rotary_home, ROTARY_FUNCTION) is stock_rotary
    assert functions[fused_ops.ATTENTION] is stock_attention
    with pytest.raises(RuntimeError), ops.installed():  # restored on errors too
        raise RuntimeError("step failed")
    assert getattr(ops.rotary_home, ROTARY_FUNCTION) is stock_rotary and "forward" not in vars(norms[0])


def test_other_threads_keep_the_stock_attention_and_rotary_while_one_context_has_them_fused(tiny):
    """The module-level hooks route by context: another engine decoding meanwhile computes the exact path's bits."""
    backbone, _ = tiny
    ops = FusedStepOps(language_model(backbone))
    attention = language_model(backbone).layers[0].self_attn
    head_dim = attention.q_norm.weight.shape[0]
    q, k = torch.randn(1, 4, 5, head_dim), torch.randn(1, 2, 5, head_dim)
    cos, sin = torch.randn(1, 5, head_dim), torch.randn(1, 5, head_dim)
    keys, values = torch.randn(1, 2, 9, head_dim), torch.randn(1, 2, 9, head_dim)
    mask = torch.ones(1, 1, 5, 9, dtype=torch.bool)

    def module_level():
        rotated = getattr(ops.rotary_home, ROTARY_FUNCTION)(q, k, cos, sin)
        attended, _ = ops.attention_functions[fused_ops.ATTENTION](attention, q, keys, values, mask, scaling=0.5)
        return (*rotated, attended)

    # markers in place of the compiled functions show which caller was routed where
    ops.rotary = lambda q, k, cos, sin: (torch.full_like(q, 7.0), torch.full_like(k, 7.0))
    ops.attention = lambda query, key, value, mask, scale: torch.full((1, 5, 4, head_dim), 7.0)
    with torch.inference_mode():
        stock = module_level()
        seen = {}
        with ops.installed():
            fused = module_level()
            other = threading.Thread(target=lambda: seen.update(values=module_level()))
            other.start()
            other.join()
        after = module_level()
    assert all(torch.equal(a, b) for a, b in zip(seen["values"], stock, strict=True))
    assert all(bool((a == 7.0).all()) for a in fused)
    assert all(torch.equal(a, b) for a, b in zip(after, stock, strict=True))


def test_a_failing_compile_is_logged_once_and_the_stock_chains_run(tiny, monkeypatch, caplog):
    backbone, _ = tiny
    layer = language_model(backbone).layers[0]
    hidden = torch.randn(1, 5, layer.input_layernorm.weight.shape[0])

    def broken_compile(function, **_):
        def run(*args):
            raise RuntimeError("no C++ compiler")

        return run

    monkeypatch.setattr(fused_ops.torch, "compile", broken_compile)
    ops = FusedStepOps(language_model(backbone))
    with torch.inference_mode():
        expected = layer.input_layernorm(hidden)
        with caplog.at_level(logging.WARNING, logger=fused_ops.__name__), ops.installed():
            first, second = layer.input_layernorm(hidden), layer.input_layernorm(hidden)
    assert ops.failed
    assert torch.equal(first, expected) and torch.equal(second, expected)
    assert len([r for r in caplog.records if "torch.compile" in r.getMessage()]) == 1


def test_fast_engine_with_fused_kernels_steps_like_the_stock_step_and_decodes(tiny, monkeypatch):
    """Block step hidden states within float32 noise of the stock step's; the decoder runs them end to end, its
    masked attention through `grouped_attention`."""
    backbone, processor = tiny
    masked_attention = []
    attention_forward = fused_ops._attention_forward

    def counted(attend, stock, module, query, key, value, attention_mask, **kwargs):
        masked_attention.append(attention_mask is not None)
        return attention_forward(attend, stock, module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(fused_ops, "_attention_forward", counted)
    inputs = inputs_for(processor, tiny_conversations(), "left")
    config = DecodeConfig(max_new_tokens=11, block_size=8, denoising_steps=8)
    with torch.inference_mode():
        outputs = {}
        for compiled in (False, True):
            runner = FastRunner(backbone, fused=compiled)
            batch, prompt_len = inputs.input_ids.shape
            positions, _ = backbone.rope_index(inputs.input_ids, inputs.attention_mask, inputs.image_grid_thw)
            mask4 = torch.ones(batch, 1, prompt_len, prompt_len, dtype=torch.bool)
            runner.prefill(
                inputs.input_ids, mask4, positions, inputs.pixel_values, inputs.image_grid_thw, prompt_len + 8
            )
            block = torch.full((batch, 8), config.mask_token_id)
            block_positions = positions[:, :, -1:] + torch.arange(1, 9).view(1, 1, 8)
            block_mask = torch.ones(batch, 1, 8, prompt_len + 8, dtype=torch.bool)
            outputs[compiled] = runner._hidden(block, block_positions, block_mask, prompt_len)
        torch.testing.assert_close(outputs[True], outputs[False], rtol=1e-4, atol=1e-4)
        runners = Runners(backbone)
        fused = block_diffusion_decode(
            backbone,
            inputs.input_ids,
            inputs.attention_mask,
            inputs.pixel_values,
            inputs.image_grid_thw,
            config.with_overrides(engine="fused"),
            runners=runners,
        )
    assert not runners.select("fused").fused_ops.failed
    layers = len(language_model(backbone).layers)
    assert len(masked_attention) >= layers * (1 + 2 * 2) and all(masked_attention)  # 1 step here; 2 blocks x 2+
    assert fused.sequences.shape == (3, 16) and len(fused.steps_per_block) == 2  # two whole blocks
    assert all(1 <= steps <= 8 for steps in fused.steps_per_block)
