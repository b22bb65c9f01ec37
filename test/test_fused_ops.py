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
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine import fused as fused_ops
from wam_diff2_ros.core.engine.decoding import DecodeConfig, block_diffusion_decode
from wam_diff2_ros.core.engine.fast import FastRunner
from wam_diff2_ros.core.engine.fused import FusedStepOps
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


@pytest.fixture()
def fresh():
    """A model of its own: building fused ops swaps its modules for the step module types."""
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    return BlockDiffusionBackbone(load_model(info, torch.device("cpu"), torch.float32))


def stock_rotary(backbone):
    """transformers' own rotary function of the Qwen3-VL text attention (never replaced)."""
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    return modeling_qwen3_vl.apply_rotary_pos_emb


def test_compiled_chains_compute_what_the_stock_modules_compute(fresh):
    layer = language_model(fresh).layers[0]
    norm, attention, mlp = layer.input_layernorm, layer.self_attn, layer.mlp  # the stock modules
    rotate = stock_rotary(fresh)
    head_dim = attention.q_norm.weight.shape[0]
    hidden = torch.randn(2, 7, norm.weight.shape[0])
    heads = torch.randn(2, 7, 4, head_dim)
    q, k = torch.randn(2, 4, 7, head_dim), torch.randn(2, 2, 7, head_dim)
    cos, sin = torch.randn(2, 7, head_dim), torch.randn(2, 7, head_dim)
    # attention of 7 block rows on 19 cached slots (2 query heads per key/value head), some slots masked
    keys, values = torch.randn(2, 2, 19, head_dim), torch.randn(2, 2, 19, head_dim)
    mask = torch.rand(2, 1, 7, 19) < 0.7
    mask[..., 12:] = True  # every row sees something
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    with torch.inference_mode():
        expected = (
            norm(hidden), attention.q_norm(heads), mlp(hidden), *rotate(q, k, cos, sin),
            sdpa(attention, q, keys, values, mask, scaling=attention.scaling)[0],
        )  # fmt: skip
        ops = FusedStepOps(language_model(fresh))
        step_layer = language_model(fresh).layers[0]

        def computed():
            return (
                step_layer.input_layernorm(hidden), step_layer.self_attn.q_norm(heads), step_layer.mlp(hidden),
                *(ops.rotary(q, k, cos, sin) if fused_ops._ACTIVE.get() else rotate(q, k, cos, sin)),
                fused_ops.step_attention(step_layer.self_attn, q, keys, values, mask, scaling=attention.scaling)[0],
            )  # fmt: skip

        outside = computed()
        with ops.installed():
            inside = computed()
    assert not ops.failed and set(ops.compiled) == {"rms_norm", "silu_gate", "rotary", "grouped_attention"}
    for want, stock, have in zip(expected, outside, inside, strict=True):
        assert torch.equal(stock, want)  # outside a step: the stock bits
        assert have.shape == want.shape and have.dtype == want.dtype
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-5)
    # and not by accident: a different input gives a different output
    with ops.installed():
        assert not torch.allclose(step_layer.input_layernorm(hidden + 1), expected[0])


def test_step_modules_replace_nothing_of_transformers_and_keep_the_stock_model(fresh):
    """Own module types with the same state dict; transformers' functions and attention table untouched; outside a
    step the model computes the stock bits."""
    model = language_model(fresh)
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    mlps = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
    rotate, sdpa = stock_rotary(fresh), ALL_ATTENTION_FUNCTIONS["sdpa"]
    keys = model.state_dict().keys()
    block = torch.randint(0, 100, (1, 8))
    with torch.inference_mode():
        before = model(input_ids=block).last_hidden_state
        ops = FusedStepOps(model)
        after = model(input_ids=block).last_hidden_state
        with ops.installed():
            inside = model(input_ids=block).last_hidden_state
    assert len(ops.norms) == len(norms) == 4 * len(model.layers) + 1 and len(ops.mlps) == len(mlps) == len(model.layers)
    assert len(ops.attentions) == len(model.layers)
    assert all(isinstance(layer.self_attn, fused_ops.StepAttention) for layer in model.layers)
    assert model.state_dict().keys() == keys
    assert model.config._attn_implementation == fused_ops.STEP_ATTENTION
    assert ALL_ATTENTION_FUNCTIONS[fused_ops.STEP_ATTENTION] is fused_ops.step_attention
    assert stock_rotary(fresh) is rotate and ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa
    assert torch.equal(after, before)
    torch.testing.assert_close(inside, before, rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError), ops.installed():  # left on errors too
        raise RuntimeError("step failed")
    assert fused_ops._ACTIVE.get() is None


def test_other_threads_keep_the_stock_computation_while_one_context_has_them_fused(fresh):
    """The step modules route by context: another engine decoding meanwhile computes the exact path's bits."""
    ops = FusedStepOps(language_model(fresh))
    layer = language_model(fresh).layers[0]
    hidden = torch.randn(1, 5, layer.input_layernorm.weight.shape[0])
    head_dim = layer.self_attn.q_norm.weight.shape[0]
    q, keys = torch.randn(1, 4, 5, head_dim), torch.randn(1, 2, 9, head_dim)
    mask = torch.ones(1, 1, 5, 9, dtype=torch.bool)

    def computed():
        attended, _ = fused_ops.step_attention(layer.self_attn, q, keys, keys, mask, scaling=0.5)
        return layer.input_layernorm(hidden), layer.mlp(hidden), attended

    # markers in place of the compiled functions show which caller was routed where
    ops.norm = lambda hidden, weight, eps: torch.full_like(hidden, 7.0)
    ops.gate = lambda gate, up: torch.full_like(gate, 7.0)
    ops.attention = lambda query, key, value, mask, scale: torch.full((1, 5, 4, head_dim), 7.0)
    with torch.inference_mode():
        stock = computed()
        seen = {}
        with ops.installed():
            fused = computed()
            other = threading.Thread(target=lambda: seen.update(values=computed()))
            other.start()
            other.join()
        after = computed()
    assert all(torch.equal(a, b) for a, b in zip(seen["values"], stock, strict=True))
    assert bool((fused[0] == 7.0).all()) and bool((fused[2] == 7.0).all())
    assert not torch.equal(fused[1], stock[1])  # the gate's 7s through the down projection
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


def test_within_stock_chains_the_compiled_chains_are_not_called(tiny, monkeypatch):
    backbone, _ = tiny
    layer = language_model(backbone).layers[0]
    hidden = torch.randn(1, 5, layer.input_layernorm.weight.shape[0])
    calls: list[str] = []

    def counting_compile(function, **_):
        def run(*args):
            calls.append(function.__name__)
            return function(*args)

        return run

    monkeypatch.setattr(fused_ops.torch, "compile", counting_compile)
    ops = FusedStepOps(language_model(backbone))
    with torch.inference_mode(), ops.installed():
        with fused_ops.stock_chains():  # what the benchmark's aten-op counter runs under
            layer.input_layernorm(hidden)
        assert calls == []
        layer.input_layernorm(hidden)
    assert calls == ["rms_norm"] and not ops.failed


def test_fast_engine_with_fused_kernels_steps_like_the_stock_step_and_decodes(tiny, monkeypatch):
    """Block step hidden states within float32 noise of the stock step's; the decoder runs them end to end, its
    masked attention through `grouped_attention`."""
    backbone, processor = tiny
    masked_attention = []
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
        runner = runners.select("fused")
        runner.step_ops()  # builds the ops; their attention counted from here on
        attend = runner.fused_ops.attention
        runner.fused_ops.attention = lambda *args: masked_attention.append(args[3] is not None) or attend(*args)
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
    assert len(masked_attention) >= layers * 2 * 2 and all(masked_attention)  # 2 blocks x 2+ forwards
    assert fused.sequences.shape == (3, 16) and len(fused.steps_per_block) == 2  # two whole blocks
    assert all(1 <= steps <= 8 for steps in fused.steps_per_block)
