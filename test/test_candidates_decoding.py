"""Candidate batches in the decoder: one prefill broadcast to N rows, each row at its own temperature.

Checked on real transformers Qwen3-VL modules (tiny checkpoints): the fast engine gives the exact engine's tokens
for every row (eager steps, the CPU kernels' masked rows, and the CUDA-graph step computed eagerly); a row at
temperature 0 gives the single prompt's greedy tokens; rows all at one temperature give what the reference gives
for the prompt repeated N times (the same rules per row, the same draws); the per-row sampler equals
`sample_tokens` row by row.
"""

from __future__ import annotations

import pytest
import torch
from core_helpers import noise_image, tiny_checkpoint

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine.decoding import DecodeConfig, block_diffusion_decode
from wam_diff2_ros.core.engine.fast import CudaGraphSteps, FastRunner
from wam_diff2_ros.core.engine.sampling import RowSampling, draw_uniform, sample_batch, sample_tokens
from wam_diff2_ros.core.model import BlockDiffusionBackbone
from wam_diff2_ros.core.prompts import build_messages

pytestmark = pytest.mark.core

STRATEGIES = ("low_confidence_dynamic", "low_confidence_static", "sequential")


@pytest.fixture(scope="module")
def tiny():
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    model = load_model(info, torch.device("cpu"), torch.float32)
    processor = load_processor(info)
    conversation = build_messages("Front view: <image>\nThe navigation information is: left", [noise_image(64, 64)])
    return BlockDiffusionBackbone(model), processor, conversation


def decode(backbone, inputs, config, engine, rows=None):
    return block_diffusion_decode(
        backbone,
        inputs.input_ids,
        inputs.attention_mask,
        inputs.pixel_values,
        inputs.image_grid_thw,
        config.with_overrides(engine=engine),
        row_temperatures=rows,
    )


def test_the_row_sampler_samples_each_row_as_sample_tokens_does_alone():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 6, 50, generator=generator)
    uniform = draw_uniform(4 * 6, logits.dtype, logits.device, torch.Generator().manual_seed(9))
    temperatures = (0.0, 0.7, 0.7, 1.3)
    tokens, probs = sample_batch(logits, RowSampling(temperatures, top_k=10, top_p=0.9), uniform=uniform)
    for row, temperature in enumerate(temperatures):
        draws = uniform.view(4, 6, 1)[row] if temperature else None
        alone = sample_tokens(logits[row : row + 1], temperature, 10, 0.9, uniform=draws)
        assert tokens[row].tolist() == alone[0][0].tolist()
        assert torch.equal(probs[row], alone[1][0])


@pytest.mark.parametrize(
    ("strategy", "block_size", "steps", "temperature", "top_k", "top_p"),
    [
        ("low_confidence_dynamic", 8, 5, 1.0, 0, 1.0),
        ("low_confidence_static", 4, 4, 0.8, 20, 1.0),
        ("sequential", 8, 6, 0.7, 0, 0.9),
        ("low_confidence_dynamic", 32, 7, 1.2, 50, 0.95),
    ],
)
def test_each_candidate_row_is_the_same_in_both_engines_and_row_0_is_the_greedy_answer(
    tiny, strategy, block_size, steps, temperature, top_k, top_p
):
    backbone, processor, conversation = tiny
    inputs = processor([conversation])
    config = DecodeConfig(
        max_new_tokens=2 * block_size + 3, block_size=block_size, denoising_steps=steps, remasking_strategy=strategy,
        temperature=0.0, top_k=top_k, top_p=top_p, seed=11,
    )  # fmt: skip
    rows = (0.0,) + (temperature,) * 3
    exact, fast = (decode(backbone, inputs, config, engine, rows) for engine in ("exact", "fast"))
    assert exact.sequences.shape[0] == 4
    assert fast.sequences.tolist() == exact.sequences.tolist()
    assert fast.steps_per_block == exact.steps_per_block and fast.finished == exact.finished
    assert fast.token_confidence == exact.token_confidence
    greedy = decode(backbone, inputs, config, "exact")
    assert exact.token_ids[0] == greedy.token_ids[0]
    # the batch's matrix products may round differently from one row's: the tokens are the same, the
    # probabilities equal to float32 rounding
    assert exact.token_confidence[0] == pytest.approx(greedy.token_confidence[0], rel=1e-5)
    # the sampled rows differ from one another on random weights (they are sampled, not copies)
    assert len({tuple(ids) for ids in exact.token_ids[1:]}) > 1


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_one_prefill_broadcast_gives_what_the_prompt_repeated_gives(tiny, temperature):
    """Rows all at one temperature: the tokens of the reference's batch of the same prompt N times (its own N-row
    prefill, one draw per position), in both engines."""
    backbone, processor, conversation = tiny
    config = DecodeConfig(max_new_tokens=19, block_size=8, denoising_steps=5, temperature=temperature, seed=4)
    repeated = decode(backbone, processor([conversation] * 3), config, "exact")
    for engine in ("exact", "fast"):
        broadcast = decode(backbone, processor([conversation]), config, engine, (temperature,) * 3)
        assert broadcast.sequences.tolist() == repeated.sequences.tolist()
        assert broadcast.steps_per_block == repeated.steps_per_block


def test_candidate_rows_on_the_cuda_graph_step_computed_eagerly(tiny, monkeypatch):
    """The graph path (whole-bucket step, bucket caches per batch) run eagerly on CPU gives the exact rows."""
    backbone, processor, conversation = tiny
    store = CudaGraphSteps(capture=False)
    init = FastRunner.__init__

    def bucket_steps(self, backbone, cuda_graphs=True, fused=False, triton_kernels=False):
        init(self, backbone, cuda_graphs, fused, triton_kernels)
        self.masked_rows_only, self.graphs = False, store

    monkeypatch.setattr(FastRunner, "__init__", bucket_steps)
    inputs = processor([conversation])
    config = DecodeConfig(max_new_tokens=19, block_size=8, denoising_steps=5, seed=2)
    rows = (0.0, 1.0, 1.0)
    exact, fast = (decode(backbone, inputs, config, engine, rows) for engine in ("exact", "fast"))
    assert fast.sequences.tolist() == exact.sequences.tolist()
    assert (3, 256) in store.caches


def test_candidate_rows_need_one_prompt(tiny):
    backbone, processor, conversation = tiny
    with pytest.raises(ValueError, match="one-prompt batch"):
        decode(backbone, processor([conversation] * 2), DecodeConfig(max_new_tokens=8, block_size=8), "exact", (0, 1))
