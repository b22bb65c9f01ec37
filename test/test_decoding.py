"""Block-diffusion decoder: the algorithm step by step (scripted backbone) and against a naive decoder.

The scripted backbone is a test double of the model layer only: it returns chosen probabilities so each
rule of the algorithm (threshold, fallback, static budgets, sequential order, leftover fill, EOS handling,
commit passes, positions, masks) is checked exactly. The naive decoder below re-implements the algorithm
without a KV cache (a full forward of prompt + decoded blocks + current block at every step) on a real
transformers Qwen3-VL model, and must give the same tokens for every strategy, block size, batch layout and
sampling mode.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
import torch
from core_helpers import noise_image, tiny_checkpoint

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine.decoding import (
    EOS_TOKEN_ID,
    MASK_TOKEN_ID,
    DecodeConfig,
    DecodeConfigError,
    block_diffusion_decode,
    select_transfers,
    transfer_schedule,
)
from wam_diff2_ros.core.engine.sampling import first_max_index, sample_tokens
from wam_diff2_ros.core.model import BlockDiffusionBackbone
from wam_diff2_ros.core.prompts import build_messages

pytestmark = pytest.mark.core

VOCAB = 151936


def peaked_logits(choices: list[list[tuple[int, float]]]) -> torch.Tensor:
    """Logits whose softmax gives probability p to token t at each position (choices[b][i] = (t, p))."""
    batch, length = len(choices), len(choices[0])
    logits = torch.zeros(batch, length, VOCAB)
    for b, row in enumerate(choices):
        for i, (token, p) in enumerate(row):
            logits[b, i, token] = math.log(p) - math.log((1.0 - p) / (VOCAB - 1))
    return logits


@dataclass
class ScriptedBackbone:
    """Test double of BlockDiffusionBackbone: step k returns script(k, tokens) and records every call."""

    script: object
    prompt_positions: torch.Tensor | None = None
    deltas: torch.Tensor | None = None
    calls: list[dict] = field(default_factory=list)
    commits: list[dict] = field(default_factory=list)
    prefill_masks: list[torch.Tensor] = field(default_factory=list)

    dtype = torch.float32

    def rope_index(self, input_ids, attention_mask, image_grid_thw):
        batch, length = input_ids.shape
        positions = self.prompt_positions
        if positions is None:
            positions = torch.arange(length).view(1, 1, -1).expand(3, batch, -1)
        deltas = self.deltas if self.deltas is not None else torch.zeros(batch, 1, dtype=torch.long)
        return positions, deltas

    def prefill(self, input_ids, attention_mask, position_ids, pixel_values, image_grid_thw):
        self.prefill_masks.append(attention_mask.clone())
        return type("Prefill", (), {"cache": object(), "vision_seconds": 0.0})()

    def step_logits(self, block_ids, position_ids, attention_mask, cache):
        self.calls.append({"tokens": block_ids.clone(), "positions": position_ids.clone(), "mask": attention_mask})
        return self.script(len(self.calls) - 1, block_ids)

    def commit(self, block_ids, position_ids, attention_mask, cache):
        self.commits.append({"tokens": block_ids.clone(), "positions": position_ids.clone()})


def decode(backbone, config, batch=1, prompt_len=5, attention_mask=None):
    input_ids = torch.arange(100, 100 + prompt_len).repeat(batch, 1)
    config = config.with_overrides(engine="exact")  # the scripted backbone stands in for the exact runner's calls
    return block_diffusion_decode(backbone, input_ids, attention_mask, None, None, config)


# ------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("field_name", "value", "message"),
    [
        ("block_size", 0, "block_size must be >= 1"),
        ("denoising_steps", 0, "denoising_steps must be >= 1"),
        ("max_new_tokens", 0, "max_new_tokens must be >= 1"),
        ("confidence_threshold", 0.0, r"confidence_threshold must be in \(0, 1\]"),
        ("confidence_threshold", 1.5, r"confidence_threshold must be in \(0, 1\]"),
        ("top_p", 0.0, r"top_p must be in \(0, 1\]"),
        ("temperature", -1.0, "temperature must be >= 0"),
        ("top_k", -1, "top_k must be >= 0"),
        ("remasking_strategy", "random", "remasking_strategy must be one of"),
        ("seed", -3, "seed must be >= 0"),
        ("temperature", float("nan"), "temperature is NaN"),
    ],
)
def test_config_validation(field_name, value, message):
    with pytest.raises(DecodeConfigError, match=message):
        DecodeConfig(**{field_name: value})


def test_max_new_tokens_rounds_up_to_blocks():
    assert DecodeConfig(max_new_tokens=40, block_size=32).num_blocks == 2
    assert DecodeConfig(max_new_tokens=64, block_size=32).num_blocks == 2
    backbone = ScriptedBackbone(lambda k, t: peaked_logits([[(7, 0.99)] * t.shape[1]]))
    out = decode(backbone, DecodeConfig(max_new_tokens=10, block_size=4))
    assert out.sequences.shape == (1, 12)
    assert out.token_ids == [[7] * 12]
    assert out.finished == [False]


def test_transfer_schedule():
    assert transfer_schedule(32, 32) == [1] * 32
    assert transfer_schedule(32, 4) == [8, 8, 8, 8]
    assert transfer_schedule(32, 5) == [7, 7, 6, 6, 6]
    assert transfer_schedule(4, 6) == [1, 1, 1, 1, 0, 0]


# ----------------------------------------------------------------------------------------- strategies


def test_dynamic_unmasks_every_confident_position_then_the_single_best():
    def script(k, tokens):
        if k == 0:  # positions 0..2 confident, 3 at 0.9 exactly-ish, the rest not
            return peaked_logits([[(11, 0.97)] * 3 + [(12, 0.95)] + [(13, 0.5)] * 4])
        return peaked_logits([[(20 + i, 0.3 + 0.05 * i) for i in range(8)]])

    backbone = ScriptedBackbone(script)
    out = decode(backbone, DecodeConfig(max_new_tokens=8, block_size=8, denoising_steps=32))
    seen = [c["tokens"][0].tolist() for c in backbone.calls]
    assert seen[0] == [MASK_TOKEN_ID] * 8
    assert seen[1] == [11, 11, 11, 12] + [MASK_TOKEN_ID] * 4
    # then the most confident masked position (the last one, 0.65) each step
    assert seen[2] == [11, 11, 11, 12, MASK_TOKEN_ID, MASK_TOKEN_ID, MASK_TOKEN_ID, 27]
    assert out.sequences[0].tolist() == [11, 11, 11, 12, 24, 25, 26, 27]
    assert out.steps_per_block == [5]  # 1 + 4 single-token steps


def test_threshold_is_compared_in_the_confidence_dtype():
    masked = torch.tensor([[True, True]])
    finished = torch.tensor([False])
    bf16 = torch.tensor([[0.8984375, 0.5]], dtype=torch.bfloat16)  # == bf16(0.9)
    fp32 = torch.tensor([[0.8984375, 0.5]], dtype=torch.float32)
    picked_bf16 = select_transfers("low_confidence_dynamic", masked, bf16, 1, 0.9, finished)
    picked_fp32 = select_transfers("low_confidence_dynamic", masked, fp32, 1, 0.9, finished)
    assert picked_bf16.tolist() == [[True, False]]  # passes the threshold in bf16
    assert picked_fp32.tolist() == [[True, False]]  # below it in fp32: picked as the single best instead
    fp32_two = torch.tensor([[0.8984375, 0.8984]], dtype=torch.float32)
    bf16_two = fp32_two.to(torch.bfloat16)
    assert select_transfers("low_confidence_dynamic", masked, fp32_two, 1, 0.9, finished).sum() == 1
    assert select_transfers("low_confidence_dynamic", masked, bf16_two, 1, 0.9, finished).sum() == 2


def test_static_unmasks_the_k_most_confident():
    probs = [0.2, 0.9, 0.3, 0.8, 0.1, 0.7, 0.6, 0.5]

    def script(k, tokens):
        return peaked_logits([[(30 + i, probs[i]) for i in range(8)]])

    backbone = ScriptedBackbone(script)
    out = decode(
        backbone,
        DecodeConfig(max_new_tokens=8, block_size=8, denoising_steps=4, remasking_strategy="low_confidence_static"),
    )
    unmasked = [[t != MASK_TOKEN_ID for t in c["tokens"][0].tolist()] for c in backbone.calls]
    assert [sum(u) for u in unmasked] == [0, 2, 4, 6]
    assert [i for i, u in enumerate(unmasked[1]) if u] == [1, 3]  # 0.9 and 0.8 first
    assert [i for i, u in enumerate(unmasked[2]) if u] == [1, 3, 5, 6]
    assert out.sequences[0].tolist() == [30 + i for i in range(8)]
    assert out.steps_per_block == [4]


def test_sequential_unmasks_left_to_right_whatever_the_confidence():
    def script(k, tokens):
        return peaked_logits([[(40 + i, 0.99 if i == 7 else 0.1) for i in range(8)]])

    backbone = ScriptedBackbone(script)
    decode(backbone, DecodeConfig(max_new_tokens=8, block_size=8, denoising_steps=3, remasking_strategy="sequential"))
    masks = [[t == MASK_TOKEN_ID for t in c["tokens"][0].tolist()] for c in backbone.calls]
    assert masks[1] == [False] * 3 + [True] * 5  # schedule 3, 3, 2
    assert masks[2] == [False] * 6 + [True] * 2


def test_positions_still_masked_after_the_last_step_take_the_last_proposal():
    def script(k, tokens):
        return peaked_logits([[(50 + k, 0.2 + 0.01 * i) for i in range(4)]])

    backbone = ScriptedBackbone(script)
    out = decode(backbone, DecodeConfig(max_new_tokens=4, block_size=4, denoising_steps=2))
    # step 0 unmasks position 3 (token 50), step 1 position 2 (token 51); 0 and 1 take step 1's proposal
    assert out.sequences[0].tolist() == [51, 51, 51, 50]
    assert out.steps_per_block == [2]


def test_a_proposed_mask_token_keeps_the_position_masked():
    def script(k, tokens):
        if k == 0:
            return peaked_logits([[(MASK_TOKEN_ID, 0.99), (5, 0.99)]])
        return peaked_logits([[(6, 0.99), (7, 0.99)]])

    backbone = ScriptedBackbone(script)
    out = decode(backbone, DecodeConfig(max_new_tokens=2, block_size=2))
    assert backbone.calls[1]["tokens"][0].tolist() == [MASK_TOKEN_ID, 5]
    assert out.sequences[0].tolist() == [6, 5]


def test_eos_finishes_a_sample_and_the_batch_stops_when_all_are_done():
    def script(k, tokens):
        rows = []
        for b in range(tokens.shape[0]):
            if b == 0:
                rows.append([(60, 0.99), (EOS_TOKEN_ID, 0.99), (61, 0.99), (62, 0.99)])
            else:  # sample 1 ends in its second block
                rows.append(
                    [(70, 0.99)] * 4
                    if len(script.blocks) < 1
                    else [(71, 0.99), (EOS_TOKEN_ID, 0.99), (72, 0.99), (72, 0.99)]
                )
        return peaked_logits(rows)

    script.blocks = []
    backbone = ScriptedBackbone(script)
    backbone.commit = lambda *a, **k: script.blocks.append(a[0].clone())  # type: ignore[method-assign]
    out = decode(backbone, DecodeConfig(max_new_tokens=12, block_size=4), batch=2)
    assert out.sequences[0].tolist() == [60, EOS_TOKEN_ID, 61, 62] + [EOS_TOKEN_ID] * 4 + [MASK_TOKEN_ID] * 4
    assert out.sequences[1].tolist() == [70] * 4 + [71, EOS_TOKEN_ID, 72, 72] + [MASK_TOKEN_ID] * 4
    assert out.token_ids == [[60], [70, 70, 70, 70, 71]]
    assert out.finished == [True, True]
    assert len(script.blocks) == 1  # committed block 0 only; after block 1 everyone is finished
    assert script.blocks[0].tolist() == [[60, EOS_TOKEN_ID, 61, 62], [70] * 4]
    block1_inputs = backbone.calls[1]["tokens"]
    assert block1_inputs[0].tolist() == [EOS_TOKEN_ID] * 4  # a finished sample is fed EOS
    assert out.steps_per_block == [1, 1]


def test_positions_masks_and_commits():
    backbone = ScriptedBackbone(
        lambda k, t: peaked_logits([[(9, 0.99)] * t.shape[1]] * t.shape[0]),
        deltas=torch.tensor([[-3], [2]]),
    )
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    decode(backbone, DecodeConfig(max_new_tokens=8, block_size=4), batch=2, attention_mask=mask)
    prefill = backbone.prefill_masks[0]
    assert prefill.shape == (2, 1, 5, 5)
    # prompt blocks of 4 from the prompt start: [0..3], [4]; row 0 token 0 is padding
    assert not prefill[0, 0, 0].any() and not prefill[0, 0, :, 0].any()
    assert prefill[1, 0, 3].tolist() == [True, True, True, True, False]
    assert prefill[1, 0, 4].tolist() == [True] * 5
    step = backbone.calls[1]
    assert step["mask"].shape == (2, 1, 4, 13) and step["mask"].all()  # block 1 sees everything (pads too)
    assert step["positions"][0].tolist() == [[9 - 3 + i for i in range(4)], [9 + 2 + i for i in range(4)]]
    assert torch.equal(step["positions"][0], step["positions"][2])
    assert [c["positions"][0, 0, 0].item() for c in backbone.commits] == [5 - 3]


# -------------------------------------------------------------------------------------------- sampling


def test_greedy_sampling_is_argmax_with_its_probability():
    logits = torch.randn(2, 3, 50)
    tokens, probs = sample_tokens(logits)
    assert torch.equal(tokens, logits.argmax(-1))
    torch.testing.assert_close(probs, torch.softmax(logits, -1).max(-1).values)


@pytest.mark.parametrize("vocab", [VOCAB, 2048, 3073, 2047, 50])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_first_max_index_is_argmax_with_ties_infinities_and_nans(vocab, dtype):
    generator = torch.Generator().manual_seed(vocab)
    rows = torch.randn(12, vocab, generator=generator).to(dtype)
    top = rows.max().item() + 1.0
    last = vocab - 1
    rows[0, [5, last]] = top  # a tie between the first and the last (short) segment
    rows[1, [last - 1, last]] = top  # a tie inside the last segment
    rows[2, last] = top  # the maximum in the last column
    rows[3, [vocab // 2, 3]] = top  # a tie, the later index written first
    rows[4] = float("-inf")  # no maximum above -inf: index 0
    rows[5, [7, vocab // 2]] = float("inf")
    rows[6, [vocab // 3, last]] = float("nan")  # NaN counts as the maximum, the first one wins
    rows[7, [9, last]] = top
    rows[7, vocab // 2] = float("nan")
    rows[8] = top  # all equal
    rows[9, 0] = float("nan")
    rows[10, last] = float("nan")
    expected = torch.argmax(rows, dim=-1, keepdim=True)
    assert torch.equal(first_max_index(rows), expected)
    assert torch.equal(first_max_index(rows[3:5]), expected[3:5])  # a view of some rows
    tokens, _ = sample_tokens(rows.view(3, 4, vocab))
    assert torch.equal(tokens, expected.view(3, 4))


def test_seeded_sampling_is_reproducible_and_uses_one_draw_per_position():
    logits = torch.randn(2, 8, 300)
    generator = torch.Generator().manual_seed(7)
    first = sample_tokens(logits, temperature=0.8, top_k=40, generator=generator)
    again = sample_tokens(logits, temperature=0.8, top_k=40, generator=torch.Generator().manual_seed(7))
    assert torch.equal(first[0], again[0])
    torch.manual_seed(7)  # the reference draws from the global generator after torch.manual_seed
    global_rng = sample_tokens(logits, temperature=0.8, top_k=40)
    assert torch.equal(first[0], global_rng[0])
    reference = torch.Generator().manual_seed(7)
    torch.rand(16, 1, generator=reference)  # exactly one uniform per position (2 x 8)
    assert torch.equal(generator.get_state(), reference.get_state())


def test_top_k_one_and_tiny_top_p_are_greedy():
    logits = torch.randn(1, 16, 2000)  # top-p alone works on the top 1000 (sorted), as in the reference
    greedy = logits.argmax(-1)
    for kwargs in ({"top_k": 1}, {"top_p": 1e-6}):
        tokens, probs = sample_tokens(logits, temperature=1.0, generator=torch.Generator().manual_seed(0), **kwargs)
        assert torch.equal(tokens, greedy)
        torch.testing.assert_close(probs, torch.ones_like(probs))


def test_sampled_tokens_follow_the_distribution():
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1])).view(1, 1, 3).expand(1, 20000, 3).contiguous()
    tokens, _ = sample_tokens(logits, temperature=1.0, generator=torch.Generator().manual_seed(1))
    frequencies = torch.bincount(tokens.flatten(), minlength=3).float() / tokens.numel()
    torch.testing.assert_close(frequencies, torch.tensor([0.7, 0.2, 0.1]), atol=0.015, rtol=0)


# ------------------------------------------------------------------------ real model vs naive decoder


def reference_rope(model, input_ids, attention_mask, image_grid_thw):
    """transformers' own rope index, in the reference's (transformers 4.57) conventions.

    transformers 5 differs for padded rows: pads get position 0 instead of 1 and the delta is taken
    against the unpadded length; both are mapped back here.
    """
    import inspect

    function = model.model.get_rope_index
    if "mm_token_type_ids" in inspect.signature(function).parameters:
        token_types = (input_ids == model.config.image_token_id).int()
        positions, deltas = function(
            input_ids, mm_token_type_ids=token_types, image_grid_thw=image_grid_thw, attention_mask=attention_mask
        )
        positions = positions.masked_fill(attention_mask[None] == 0, 1)
        deltas = deltas.view(-1) + attention_mask.sum(dim=1) - input_ids.shape[1]
    else:
        positions, deltas = function(input_ids, image_grid_thw, None, attention_mask=attention_mask)
    return positions, deltas.view(-1, 1)


def naive_decode(model, inputs, config: DecodeConfig) -> torch.Tensor:
    """The algorithm without a KV cache: a full forward of everything decoded so far at every step."""
    ids, valid = inputs.input_ids, inputs.attention_mask.bool()
    batch, prompt_len = ids.shape
    bs = config.block_size
    blocks = -(-config.max_new_tokens // bs)
    prompt_pos, deltas = reference_rope(model, ids, inputs.attention_mask, inputs.image_grid_thw)
    generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
    response = torch.full((batch, blocks * bs), MASK_TOKEN_ID, dtype=torch.long)
    finished = [False] * batch
    schedule = transfer_schedule(bs, config.denoising_steps)
    for block in range(blocks):
        current = torch.full((batch, bs), MASK_TOKEN_ID, dtype=torch.long)
        for row in range(batch):
            if finished[row]:
                current[row] = EOS_TOKEN_ID
        proposal = current
        for step in range(config.denoising_steps):
            masked = [
                [not finished[r] and current[r, i].item() == MASK_TOKEN_ID for i in range(bs)] for r in range(batch)
            ]
            if not any(itertools.chain.from_iterable(masked)):
                break
            sequence = torch.cat([ids, response[:, : block * bs], current], dim=1)
            total = sequence.shape[1]
            block_of = torch.tensor(
                [i // bs if i < prompt_len else -(-prompt_len // bs) + (i - prompt_len) // bs for i in range(total)]
            )
            mask = (block_of[None, :] <= block_of[:, None]).expand(batch, 1, total, total).clone()
            for row in range(batch):  # prompt rows: padding neither queries nor is seen; response rows see all
                mask[row, 0, :prompt_len, :prompt_len] &= valid[row][:, None] & valid[row][None, :]
            later = torch.arange(prompt_len, total).view(1, -1) + deltas
            positions = torch.cat([prompt_pos, later.unsqueeze(0).expand(3, -1, -1)], dim=2)
            with torch.no_grad():
                logits = model(
                    input_ids=sequence,
                    attention_mask=mask,
                    position_ids=positions,
                    pixel_values=inputs.pixel_values,
                    image_grid_thw=inputs.image_grid_thw,
                ).logits[:, -bs:]
            proposal, confidence = sample_tokens(logits, config.temperature, config.top_k, config.top_p, generator)
            for row in range(batch):
                open_positions = [i for i in range(bs) if masked[row][i]]
                if finished[row] or not open_positions:
                    continue
                conf = {i: confidence[row, i] for i in open_positions}
                if config.remasking_strategy == "sequential":
                    chosen = open_positions[: schedule[step]]
                elif config.remasking_strategy == "low_confidence_static":
                    scores = torch.full((bs,), -torch.inf, dtype=confidence.dtype)
                    for i in open_positions:
                        scores[i] = conf[i]
                    chosen = torch.topk(scores, min(schedule[step], len(open_positions))).indices.tolist()
                else:
                    chosen = [i for i in open_positions if conf[i] >= config.confidence_threshold]
                    if not chosen:
                        scores = torch.full((bs,), -torch.inf, dtype=confidence.dtype)
                        for i in open_positions:
                            scores[i] = conf[i]
                        chosen = torch.topk(scores, 1).indices.tolist()
                for i in chosen:
                    current[row, i] = proposal[row, i]
        for row in range(batch):
            if finished[row]:
                current[row] = EOS_TOKEN_ID
                continue
            for i in range(bs):
                if current[row, i] == MASK_TOKEN_ID:
                    current[row, i] = proposal[row, i]
        response[:, block * bs : (block + 1) * bs] = current
        finished = [finished[r] or EOS_TOKEN_ID in current[r].tolist() for r in range(batch)]
        if all(finished):
            break
    return response


@pytest.fixture(scope="module")
def real_model():
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    model = load_model(info, torch.device("cpu"), torch.float32).to(torch.float64)
    processor = load_processor(info)
    conversations = [
        build_messages(
            "Here is a front-view image: <image>\nThe navigation information is: left", [noise_image(64, 64)]
        ),
        build_messages(
            "Describe the scene <image> in a few more words than the other prompt", [noise_image(96, 64, 1)]
        ),
    ]
    return model, processor, conversations


CASES = [
    (strategy, bs, layout)
    for strategy in ("low_confidence_dynamic", "low_confidence_static", "sequential")
    for bs in (4, 8, 32)
    for layout in ("single", "left", "right")
]


@pytest.mark.parametrize(("strategy", "block_size", "layout"), CASES)
def test_matches_the_naive_decoder_greedy(real_model, strategy, block_size, layout):
    model, processor, conversations = real_model
    batch = conversations[:1] if layout == "single" else conversations
    inputs = processor(batch, padding_side="left" if layout == "single" else layout)
    config = DecodeConfig(
        max_new_tokens=3 * block_size if block_size < 32 else 40,
        block_size=block_size,
        denoising_steps=4 if strategy != "low_confidence_dynamic" else 32,
        remasking_strategy=strategy,
    )
    ours = block_diffusion_decode(
        BlockDiffusionBackbone(model), inputs.input_ids, inputs.attention_mask, inputs.pixel_values,
        inputs.image_grid_thw, config,
    )  # fmt: skip
    expected = naive_decode(model, inputs, config)
    assert ours.sequences.tolist() == expected.tolist()


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(0.8, 0, 1.0), (1.0, 50, 1.0), (0.7, 0, 0.9)])
def test_matches_the_naive_decoder_seeded_sampling(real_model, temperature, top_k, top_p):
    model, processor, conversations = real_model
    inputs = processor(conversations, padding_side="left")
    config = DecodeConfig(max_new_tokens=16, block_size=8, temperature=temperature, top_k=top_k, top_p=top_p, seed=11)
    backbone = BlockDiffusionBackbone(model)
    ours = block_diffusion_decode(
        backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw, config
    )
    again = block_diffusion_decode(
        backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw, config
    )
    assert ours.sequences.tolist() == again.sequences.tolist()
    assert ours.sequences.tolist() == naive_decode(model, inputs, config).tolist()
    other_seed = block_diffusion_decode(
        backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw,
        config.with_overrides(seed=12),
    )  # fmt: skip
    assert other_seed.sequences.tolist() != ours.sequences.tolist()


def test_real_model_exercises_every_unmasking_path(real_model):
    """Guard for the tests above: the tiny model's confidences must cross the threshold sometimes, not always."""
    model, processor, conversations = real_model
    inputs = processor(conversations[:1])
    out = block_diffusion_decode(
        BlockDiffusionBackbone(model), inputs.input_ids, inputs.attention_mask, inputs.pixel_values,
        inputs.image_grid_thw, DecodeConfig(max_new_tokens=32, block_size=32),
    )  # fmt: skip
    assert 1 < out.steps_per_block[0] < 32
