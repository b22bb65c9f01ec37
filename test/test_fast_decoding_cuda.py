"""The fast engine on CUDA (float32): the exact engine's tokens and step counts, with and without CUDA graphs.

Skipped without a CUDA device (CI has none); `scripts/bench_gpu.sh` runs this file on the GPU machine. The
grid is test_fast_decoding.py's (strategies, block sizes 4/8/32, fewer/equal/more denoising steps, batch 1
and 3 with left and right padding, one and two images, seeded sampling).
"""

from __future__ import annotations

import pytest
import torch
from core_helpers import tiny_checkpoint
from test_fast_decoding import GRID, inputs_for, tiny_conversations

from wam_diff2_ros.bench.host_reads import count_host_reads
from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine import triton_kernels
from wam_diff2_ros.core.engine.decoding import DecodeConfig, block_diffusion_decode
from wam_diff2_ros.core.engine.selection import Runners
from wam_diff2_ros.core.model import BlockDiffusionBackbone

pytestmark = [
    pytest.mark.core,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def tiny_cuda():
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    model = load_model(info, CUDA, torch.float32)
    return BlockDiffusionBackbone(model, synchronize=torch.cuda.synchronize), load_processor(info), tiny_conversations()


def decode(backbone, inputs, config, runners=None):
    inputs = inputs.to(CUDA)
    with torch.inference_mode():  # as the engine decodes
        return block_diffusion_decode(
            backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw, config,
            runners=runners,
        )  # fmt: skip


def assert_engines_agree(backbone, inputs, config, triton_kernels=False):
    exact = decode(backbone, inputs, config.with_overrides(engine="exact"))
    for graphs in (False, True):
        fast = decode(
            backbone, inputs, config.with_overrides(engine="fast", cuda_graphs=graphs, triton_kernels=triton_kernels)
        )
        assert fast.sequences.tolist() == exact.sequences.tolist(), f"cuda_graphs={graphs}"
        assert fast.steps_per_block == exact.steps_per_block, f"cuda_graphs={graphs}"
        assert fast.finished == exact.finished


@pytest.mark.parametrize(("strategy", "block_size", "steps", "layout"), GRID)
def test_fast_equals_exact_greedy_on_cuda(tiny_cuda, strategy, block_size, steps, layout):
    backbone, processor, conversations = tiny_cuda
    config = DecodeConfig(
        max_new_tokens=block_size + 3, block_size=block_size, denoising_steps=steps, remasking_strategy=strategy
    )
    assert_engines_agree(backbone, inputs_for(processor, conversations, layout), config)


@pytest.mark.skipif(not triton_kernels.available(), reason="triton is not installed (extra gpu-kernels)")
@pytest.mark.parametrize(("strategy", "block_size", "steps", "layout"), GRID)
def test_fast_with_triton_kernels_equals_exact_greedy_on_cuda(tiny_cuda, strategy, block_size, steps, layout):
    """The tier-1 Triton kernels (`triton_kernels=True`) keep every bit: what `auto` needs before using them."""
    backbone, processor, conversations = tiny_cuda
    config = DecodeConfig(
        max_new_tokens=block_size + 3, block_size=block_size, denoising_steps=steps, remasking_strategy=strategy
    )
    assert_engines_agree(backbone, inputs_for(processor, conversations, layout), config, triton_kernels=True)


@pytest.mark.parametrize(
    ("strategy", "temperature", "top_k", "top_p", "layout"),
    [
        ("low_confidence_dynamic", 0.8, 50, 1.0, "left"),
        ("low_confidence_static", 1.0, 0, 0.9, "right"),
        ("sequential", 0.7, 0, 0.8, "single"),
    ],
)
def test_fast_equals_exact_seeded_sampling_on_cuda(tiny_cuda, strategy, temperature, top_k, top_p, layout):
    backbone, processor, conversations = tiny_cuda
    config = DecodeConfig(
        max_new_tokens=20, block_size=8, denoising_steps=6, remasking_strategy=strategy,
        temperature=temperature, top_k=top_k, top_p=top_p, seed=5,
    )  # fmt: skip
    assert_engines_agree(backbone, inputs_for(processor, conversations, layout), config)


def test_graph_replays_read_the_device_at_most_once_per_step(tiny_cuda):
    backbone, processor, conversations = tiny_cuda
    inputs = processor(conversations, padding_side="left").to(CUDA)
    config = DecodeConfig(max_new_tokens=40, block_size=8, engine="fast")
    runners = Runners(backbone)
    decode(backbone, inputs, config, runners)  # captures
    step_phases = []

    with count_host_reads() as counter, torch.inference_mode():

        def observe(phase):
            counter.phase = phase
            step_phases.append(phase == "step")

        out = block_diffusion_decode(
            backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw, config,
            observe=observe, runners=runners,
        )  # fmt: skip
    store = runners.select("fast").graphs
    assert store.enabled and store.graphs  # replays, not the fallback
    assert sum(out.steps_per_block) >= 4
    assert counter.by_phase["step"] <= sum(step_phases)  # one read per denoising iteration at most
    assert counter.by_phase.get("block", 0) <= len(out.steps_per_block)


def test_fused_kernels_are_captured_into_the_step_graphs(tiny_cuda):
    """The fused engine: the compiled chains and, with Triton, the split-KV attention are captured into its own
    step graphs and decode whole plans (not bit-identical, so the tokens are measured by the agreement
    yardstick, `wam-diff2-bench agreement`, not asserted)."""
    backbone, processor, conversations = tiny_cuda
    inputs = inputs_for(processor, conversations, "left")
    config = DecodeConfig(max_new_tokens=20, block_size=8, engine="fast")
    runners = Runners(backbone)
    stock = decode(backbone, inputs, config, runners)
    fused = decode(backbone, inputs, config.with_overrides(engine="fused"), runners)
    runner = runners.select("fused")
    assert runner.graphs.enabled and runner.graphs.graphs and not runner.fused_ops.failed
    assert runner.triton_fused == triton_kernels.available()
    assert fused.sequences.shape == stock.sequences.shape
    assert len(fused.steps_per_block) == len(stock.steps_per_block)


def test_pixel_values_built_on_the_device_have_the_cpu_bits(tiny_cuda):
    """The engine moves uint8 patches and builds the pixel values on the GPU: the same bits as on the CPU."""
    _, processor, conversations = tiny_cuda
    inputs = processor(conversations)
    assert torch.equal(inputs.to(CUDA).pixel_values.cpu(), inputs.pixel_values)
