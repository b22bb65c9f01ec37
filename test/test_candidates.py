"""Candidate plans in the planning pipeline (core/candidates.py, core/planning.py): refusals, the choice, the
engine's batch call, and the real decoder on a tiny checkpoint (no ROS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from core_helpers import tiny_checkpoint

from wam_diff2_ros.core.camera import CameraFrame, CameraIntrinsics
from wam_diff2_ros.core.candidates import (
    MAX_CANDIDATES,
    Candidate,
    candidate_seed,
    choose,
)
from wam_diff2_ros.core.engine.decoding import DecodeConfig
from wam_diff2_ros.core.observation import Observation
from wam_diff2_ros.core.planning import InferencePipeline, PlanningConfig
from wam_diff2_ros.core.prompts import NavigationCommand

pytestmark = pytest.mark.core

STAMP = 1_700_000_000_123_000_000
GOOD = "2.33, 0.00, 4.66, 0.00, 6.99, 0.00, 9.32, 0.00, 11.65, 0.00, 13.98, 0.00, 16.31, 0.00, 18.64, 0.00"
WRONG_DIGIT = GOOD.replace("18.64", "8.64")  # one far waypoint 10 m backwards: the gate rejects it
OTHER = GOOD.replace("18.64", "18.50")


def observation() -> Observation:
    image = np.random.default_rng(0).integers(0, 256, size=(180, 320, 3), dtype=np.uint8)
    intrinsics = CameraIntrinsics.pinhole_fallback(320, 180, 70.0)
    frame = CameraFrame("front", 0, STAMP, STAMP, "front_optical", image, intrinsics)
    return Observation(
        stamp_ns=STAMP,
        frames=(frame,),
        command=NavigationCommand.STRAIGHT,
        command_source="topic",
        velocity=(4.66, 0.0),
        acceleration=(0.0, 0.0),
        acceleration_source="topic",
        odometry_stamp_ns=STAMP,
    )


@dataclass
class Answer:
    """An engine answer whose every character is a token won with `probability` (so its confidence is that)."""

    text: str
    probability: float = 0.9
    finished: bool = True
    steps_per_block: list[int] = field(default_factory=lambda: [5, 4])

    @property
    def token_confidence(self) -> list[float]:
        return [self.probability] * len(self.text)

    def token_spans(self) -> list[tuple[int, int]]:
        return [(i, i + 1) for i in range(len(self.text))]


class BatchEngine:
    """Answers row i of a candidate batch with `answers[i]`; records the calls."""

    name = "batch-double"

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompt, images=(), decode=None, system=None, started_ns=None):
        self.calls.append({"kind": "single", "decode": decode})
        return self.answers[0]

    def generate_candidates(self, prompt, images, temperatures, decode=None, system=None, started_ns=None):
        self.calls.append({"kind": "batch", "temperatures": tuple(temperatures), "decode": decode})
        return self.answers[: len(temperatures)]


def test_the_count_and_temperature_are_checked_with_the_reason() -> None:
    for count in (0, MAX_CANDIDATES + 1, -3):
        with pytest.raises(ValueError, match=r"planning.candidates must be an integer in \[1, 16\]"):
            PlanningConfig(candidates=count)
    for temperature in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=r"planning\.candidate_temperature must be > 0"):
            PlanningConfig(candidates=4, candidate_temperature=temperature)
    PlanningConfig(candidates=1, candidate_temperature=0.0)  # one greedy plan samples nothing
    PlanningConfig(candidates=MAX_CANDIDATES, candidate_temperature=0.5)


def test_the_valid_candidate_with_the_highest_score_wins_and_ties_go_to_the_lowest_row() -> None:
    def make(index, valid, score):
        return Candidate(index, 1.0, valid, "" if valid else "bad", score, (), (), "")

    assert choose([make(0, False, 0.0), make(1, True, 0.4), make(2, True, 0.7), make(3, False, 0.0)]) == 2
    assert choose([make(0, True, 0.5), make(1, True, 0.5)]) == 0
    assert choose([make(0, False, 0.0), make(1, False, 0.0)]) is None
    assert candidate_seed(STAMP) == candidate_seed(STAMP) != candidate_seed(STAMP + 1)
    assert candidate_seed(STAMP, 7) != candidate_seed(STAMP)


def test_one_batch_call_and_the_best_valid_candidate_is_the_plan() -> None:
    answers = [Answer(WRONG_DIGIT, 0.95), Answer(GOOD, 0.6), Answer(OTHER, 0.8), Answer("1.0, 2.0", 0.99)]
    engine = BatchEngine(answers)
    config = PlanningConfig(candidates=4, candidate_temperature=0.7, decode=DecodeConfig(top_k=40, top_p=0.9))
    result = InferencePipeline(engine, config).plan(observation())
    (call,) = engine.calls
    assert call["kind"] == "batch" and call["temperatures"] == (0.0, 0.7, 0.7, 0.7)
    assert call["decode"].seed == candidate_seed(STAMP) and call["decode"].top_k == 40
    assert result.valid and result.chosen_candidate == 2 and result.raw_text == OTHER
    assert result.waypoints[-1].x == pytest.approx(18.5) and result.confidence == pytest.approx(0.8)
    assert [c.valid for c in result.candidates] == [False, True, True, False]
    assert [round(c.score, 6) for c in result.candidates] == [0.0, 0.6, 0.8, 0.0]
    assert "backward" in result.candidates[0].reason and "expected 16 numbers" in result.candidates[3].reason
    # the rejected greedy answer keeps its waypoints (to be drawn); the unparseable one has none
    assert result.candidates[0].waypoints[-1].x == pytest.approx(8.64) and result.candidates[3].waypoints == ()
    assert result.candidates[0].as_record()["waypoints"][-1] == [8.64, 0.0]


def test_no_valid_candidate_is_no_plan_with_every_reason() -> None:
    engine = BatchEngine([Answer(WRONG_DIGIT), Answer("x"), Answer(WRONG_DIGIT)])
    result = InferencePipeline(engine, PlanningConfig(candidates=3)).plan(observation())
    assert not result.valid and result.waypoints == () and result.chosen_candidate == -1
    assert result.reason.startswith("no valid candidate of 3 (#0: backward")
    assert "#1: " in result.reason and len(result.candidates) == 3


def test_one_candidate_is_the_single_greedy_decode() -> None:
    engine = BatchEngine([Answer(GOOD)])
    result = InferencePipeline(engine, PlanningConfig()).plan(observation())
    assert [c["kind"] for c in engine.calls] == ["single"] and engine.calls[0]["decode"].seed is None
    assert result.valid and result.candidates == () and result.chosen_candidate == -1


def test_an_engine_without_a_batch_is_asked_one_row_after_another() -> None:
    class Sequential:
        name = "sequential-double"

        def __init__(self):
            self.decodes = []

        def generate(self, prompt, images=(), decode=None, system=None, started_ns=None):
            self.decodes.append(decode)
            return Answer(GOOD if decode.temperature else WRONG_DIGIT)

    engine = Sequential()
    result = InferencePipeline(engine, PlanningConfig(candidates=3)).plan(observation())
    assert [d.temperature for d in engine.decodes] == [0.0, 1.0, 1.0]
    assert len({d.seed for d in engine.decodes}) == 3
    assert result.valid and result.chosen_candidate == 1


@pytest.fixture(scope="module")
def tiny_engine():
    from wam_diff2_ros.core.engine import Engine

    engine = Engine.load(tiny_checkpoint(), device="cpu", dtype="float32")
    yield engine
    engine.close()


def test_real_decoder_candidates_are_the_engines_batch_rows_and_reproducible(tiny_engine) -> None:
    """On the tiny checkpoint: the pipeline's candidates are the rows of one batch seeded from the image stamp,
    row 0 is the one-candidate plan's answer, and the same frame gives the same candidates again."""
    decode = DecodeConfig(max_new_tokens=16, block_size=8, denoising_steps=3)
    single = InferencePipeline(tiny_engine, PlanningConfig(decode=decode)).plan(observation())
    pipeline = InferencePipeline(tiny_engine, PlanningConfig(decode=decode, candidates=3))
    first, second = pipeline.plan(observation()), pipeline.plan(observation())
    assert [c.raw_text for c in first.candidates] == [c.raw_text for c in second.candidates]
    assert first.candidates[0].raw_text == single.raw_text and first.candidates[0].temperature == 0.0
    prompt = pipeline.planning_prompt(observation())
    rows = tiny_engine.generate_candidates(
        prompt, observation().images, (0.0, 1.0, 1.0), decode=decode.with_overrides(seed=candidate_seed(STAMP))
    )
    assert [c.raw_text for c in first.candidates] == [g.text for g in rows]
    assert not first.valid and first.chosen_candidate == -1  # random weights answer no plan


def test_the_live_view_draws_the_unpublished_candidates_and_lists_all() -> None:
    from wam_diff2_ros.viewer.scene import CANDIDATE_COLORS, PlanUpdate, view_frame

    answers = [Answer(WRONG_DIGIT, 0.95), Answer(GOOD, 0.6), Answer(OTHER, 0.8), Answer("1.0, 2.0", 0.99)]
    result = InferencePipeline(BatchEngine(answers), PlanningConfig(candidates=4)).plan(observation())
    frame = view_frame(PlanUpdate(now_ns=STAMP, result=result))
    assert [(line.index, line.valid) for line in frame.candidates] == [(0, False), (1, True)]
    assert frame.candidates[0].color == CANDIDATE_COLORS[False] and frame.candidates[0].points[-1] == (8.64, 0.0)
    assert frame.info["chosen_candidate"] == 2 and [c["valid"] for c in frame.info["candidates"]] == [
        False, True, True, False,
    ]  # fmt: skip
