"""Deadline-aware decoding with an injected clock: each step and commit costs exactly what the test says."""

from __future__ import annotations

import itertools

import pytest
import torch
from core_helpers import noise_image, tiny_checkpoint

from wam_diff2_ros.bench.host_reads import count_host_reads
from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine.deadline import DeadlineBudget, blocks_to_share, forced_transfers
from wam_diff2_ros.core.engine.decoding import DecodeConfig, DecodeConfigError, block_diffusion_decode
from wam_diff2_ros.core.model import BlockDiffusionBackbone
from wam_diff2_ros.core.prompts import build_messages

pytestmark = pytest.mark.core

MS = 1_000_000
NEVER = -1  # an EOS id no token has: every block is decoded


class CostClock:
    """A clock (ns) that advances by the given cost whenever the decoder starts a phase (its `observe` hook)."""

    def __init__(self, step_ms: float, commit_ms: float = 0.0, prefill_ms: float = 0.0) -> None:
        self.now = 0
        self.costs = {"step": step_ms * MS, "commit": commit_ms * MS, "prefill": prefill_ms * MS}

    def __call__(self) -> int:
        return self.now

    def observe(self, phase: str) -> None:
        self.now += int(self.costs.get(phase, 0))


@pytest.fixture(scope="module")
def tiny():
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    backbone = BlockDiffusionBackbone(load_model(info, torch.device("cpu"), torch.float32))
    processor = load_processor(info)
    conversations = [
        build_messages("Front view: <image>\nThe navigation information is: left", [noise_image(64, 64)]),
        build_messages("Two cameras <image> and <image> straight", [noise_image(64, 96, 2), noise_image(64, 64, 3)]),
    ]
    return backbone, processor, conversations


def decode(tiny, config: DecodeConfig, clock: CostClock | None = None, batch: int = 1):
    backbone, processor, conversations = tiny
    inputs = processor(conversations[:batch], padding_side="left")
    return block_diffusion_decode(
        backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw, config,
        observe=clock.observe if clock else None, started_ns=0 if clock else None, clock=clock,
    )  # fmt: skip


STATIC = DecodeConfig(
    max_new_tokens=16, block_size=8, denoising_steps=8, remasking_strategy="low_confidence_static", eos_token_id=NEVER
)


def test_a_deadline_is_validated():
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(DecodeConfigError, match="deadline_ms"):
            DecodeConfig(deadline_ms=bad)


@pytest.mark.parametrize("engine", ["exact", "fast"])
def test_the_schedule_compresses_as_specified(tiny, engine):
    """2 blocks of 8, static (1 token a step unhurried), steps and commits 10 ms, deadline 100 ms from t=0.

    Block 0 gets (100 - 0) / 2 = 50 ms. Step 0 (t=10) has no measured cost yet: 1 token. Step 1 (t=20): 3 steps
    fit, 7 masked: 3 tokens; step 2 (t=30): 2 fit, 4 masked: 2; step 3 (t=40): 1 fits: the 2 left. The check at
    t=50 ends the block (4 steps); the commit ends at 60. Block 1 gets the 40 ms left: 3 steps of 3, 3, 2 tokens
    (t=70, 80, 90); done at t=100, on time. Early tokens: 2 + 1 + 1 in block 0, 2 + 2 + 1 in block 1.
    """
    out = decode(tiny, STATIC.with_overrides(engine=engine, deadline_ms=100.0), CostClock(step_ms=10, commit_ms=10))
    assert out.steps_per_block == [4, 3]
    assert out.early_tokens == [9]
    assert out.deadline_met
    assert len(out.token_ids[0]) == 16 and STATIC.mask_token_id not in out.sequences.tolist()[0]
    unhurried = decode(tiny, STATIC.with_overrides(engine=engine))
    assert unhurried.steps_per_block == [8, 8] and unhurried.early_tokens == [0]


@pytest.mark.parametrize("engine", ["exact", "fast"])
def test_a_generous_deadline_changes_nothing(tiny, engine):
    for strategy in ("low_confidence_dynamic", "low_confidence_static", "sequential"):
        config = STATIC.with_overrides(engine=engine, remasking_strategy=strategy)
        today = decode(tiny, config, batch=2)
        generous = decode(tiny, config.with_overrides(deadline_ms=1e9), CostClock(step_ms=10, commit_ms=10), batch=2)
        assert generous.sequences.tolist() == today.sequences.tolist()
        assert generous.steps_per_block == today.steps_per_block
        assert generous.early_tokens == [0, 0] and generous.deadline_met


def test_one_step_per_block_when_nothing_fits_and_the_plan_is_late(tiny):
    """Preprocessing and prefill already spent the budget: every block gets exactly one step, filled whole."""
    clock = CostClock(step_ms=10, commit_ms=10, prefill_ms=50)
    out = decode(tiny, STATIC.with_overrides(deadline_ms=20.0), clock)
    assert out.steps_per_block == [1, 1]
    assert not out.deadline_met
    assert out.early_tokens == [2 * (8 - 1)]  # static commits 1 a step; the other 7 of each block came early
    assert STATIC.mask_token_id not in out.sequences.tolist()[0]


@pytest.mark.parametrize("strategy", ["low_confidence_dynamic", "low_confidence_static", "sequential"])
def test_the_same_costs_give_the_same_tokens_on_both_engines(tiny, strategy):
    config = STATIC.with_overrides(remasking_strategy=strategy, max_new_tokens=24, deadline_ms=90.0)
    exact, fast = (
        decode(tiny, config.with_overrides(engine=engine), CostClock(step_ms=7, commit_ms=5, prefill_ms=3), batch=2)
        for engine in ("exact", "fast")
    )
    assert fast.sequences.tolist() == exact.sequences.tolist()
    assert fast.steps_per_block == exact.steps_per_block
    assert fast.early_tokens == exact.early_tokens and fast.deadline_met == exact.deadline_met
    for fast_row, exact_row in zip(fast.token_confidence, exact.token_confidence, strict=True):
        assert fast_row == pytest.approx(exact_row, abs=1e-6)
    assert sum(fast.steps_per_block) < 3 * 8  # it did compress


def test_the_deadline_adds_no_device_reads_per_step(tiny):
    config = STATIC.with_overrides(engine="fast", max_new_tokens=24)
    counts = []
    for deadline in (0.0, 90.0):
        clock = CostClock(step_ms=7, commit_ms=5)
        polls: list[int] = []

        def cancel(polls=polls):
            polls.append(counter.total)
            return False

        backbone, processor, conversations = tiny
        inputs = processor(conversations[:1])
        with count_host_reads() as counter:
            out = block_diffusion_decode(
                backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw,
                config.with_overrides(deadline_ms=deadline), cancel=cancel, observe=clock.observe, started_ns=0,
                clock=clock,
            )  # fmt: skip
        within_blocks = [b - a for a, b in itertools.pairwise(polls)]
        counts.append((max(within_blocks), counter.total - len(polls), sum(out.steps_per_block)))
    (max_plain, _, _), (max_deadline, _, steps) = counts
    assert max_deadline == max_plain <= 2 and steps < 3 * 8


def test_token_confidence_is_the_winning_probability(tiny):
    out = decode(tiny, STATIC.with_overrides(eos_token_id=STATIC.eos_token_id), batch=2)
    for tokens, confidence in zip(out.token_ids, out.token_confidence, strict=True):
        assert len(confidence) == len(tokens)
        assert all(0.0 < c <= 1.0 for c in confidence)


def test_budget_slices_and_step_cost():
    now = [0]
    budget = DeadlineBudget(100.0, started_ns=0, clock=lambda: now[0])
    budget.open_block(blocks_left=2)
    assert budget.slice_end_ns == 50 * MS
    now[0] = 10 * MS
    assert budget.begin_step() is None  # no cost measured yet
    now[0] = 30 * MS
    assert budget.begin_step() == 1  # 20 ms a step, 20 ms left
    now[0] = 34 * MS
    budget.end_steps()  # weighted 1/2 on the newest: (4 + 20) / 2
    assert budget.step_ns == 12 * MS
    now[0] = 200 * MS
    assert budget.begin_step() == 1 and not budget.met()


def test_forced_transfers_take_the_most_confident_first():
    masked = torch.tensor([[True, True, False, True, True], [False, True, True, False, False]])
    confidence = torch.tensor([[0.1, 0.9, 0.99, 0.5, 0.7], [0.3, 0.2, 0.4, 0.9, 0.9]])
    forced = forced_transfers("low_confidence_static", masked, confidence, steps_left=2)
    assert forced.tolist() == [[False, True, False, False, True], [False, False, True, False, False]]
    assert forced_transfers("sequential", masked, confidence, 2).tolist()[0] == [True, True, False, False, False]
    assert forced_transfers("low_confidence_dynamic", masked, confidence, 1).tolist() == masked.tolist()


def test_the_time_is_shared_among_the_blocks_the_answer_is_expected_to_take():
    assert [blocks_to_share(b, 4, None) for b in range(4)] == [4, 3, 2, 1]
    assert [blocks_to_share(b, 4, 3) for b in range(4)] == [3, 2, 1, 1]  # a 4th block gets all that is left
    assert blocks_to_share(0, 2, 9) == 2
