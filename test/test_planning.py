"""core.planning: observation → prompt → engine → parsed result, with the scripted engine and the real
decoder on a tiny checkpoint (no ROS)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from node_helpers import DETECTION_BOXES, ScriptedEngine, scripted_plan, tiny_checkpoint

from wam_diff2_ros.core.camera import CameraFrame, CameraIntrinsics
from wam_diff2_ros.core.engine.decoding import DecodeConfig
from wam_diff2_ros.core.image_preprocess import ImageInputError
from wam_diff2_ros.core.observation import Observation
from wam_diff2_ros.core.planning import (
    InferencePipeline,
    PlanningConfig,
    PlanningInputError,
    StageTiming,
)
from wam_diff2_ros.core.prompts import NavigationCommand

STAMP = 1_700_000_000_000_000_000


def make_frame(
    index: int = 0, width: int = 320, height: int = 180, seed: int = 0, camera: str = "front"
) -> CameraFrame:
    image = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return CameraFrame(
        camera=camera,
        index=index,
        stamp_ns=STAMP,
        receive_ns=STAMP,
        frame_id=f"{camera}_optical",
        image=image,
        intrinsics=CameraIntrinsics.pinhole_fallback(width, height, 70.0),
    )


def make_observation(command=NavigationCommand.LEFT, velocity=(4.66, -0.09), acceleration=(0.17, -1.53), frames=None):
    return Observation(
        stamp_ns=STAMP,
        frames=tuple(frames or [make_frame()]),
        command=command,
        command_source="topic",
        velocity=velocity,
        acceleration=acceleration,
        acceleration_source="topic",
        odometry_stamp_ns=STAMP,
    )


def test_plan_builds_the_trained_prompt_and_parses_the_answer() -> None:
    engine = ScriptedEngine()
    result = InferencePipeline(engine).plan(make_observation())
    call = engine.calls[-1]
    # The NAVSIM sample prompt, with the telemetry printed the training way.
    assert "The navigation information is: left\n" in call["prompt"]
    assert "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)" in call["prompt"]
    assert call["system"] is None
    assert call["decode"] == DecodeConfig()
    assert result.valid and result.reason == ""
    expected = scripted_plan("left", 4.66)
    got = [c for w in result.waypoints for c in (w.x, w.y)]
    assert got == pytest.approx([c for x, y in expected for c in (x, y)], abs=0.006)  # answered with 2 decimals
    assert [w.t for w in result.waypoints] == pytest.approx([0.5 * (i + 1) for i in range(8)])
    # Yaw from consecutive points.
    previous = (0.0, 0.0)
    for waypoint in result.waypoints:
        assert waypoint.yaw == pytest.approx(math.atan2(waypoint.y - previous[1], waypoint.x - previous[0]))
        previous = (waypoint.x, waypoint.y)
    assert result.timing == StageTiming(2.0, 3.0, 4.0, 10.0, 1.0, 20.0)
    assert result.steps_per_block == (3, 2)
    assert result.model == "scripted-engine"
    assert result.stamp_ns == STAMP


def test_images_go_in_camera_order_with_a_multi_camera_template() -> None:
    template = (
        "Front: <image>\nLeft: <image>\nThe navigation information is: {command}\n"
        "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\nPlan 8 waypoints."
    )
    frames = [make_frame(0, seed=1), make_frame(1, seed=2, camera="left")]
    engine = ScriptedEngine()
    result = InferencePipeline(engine, PlanningConfig(template=template)).plan(make_observation(frames=frames))
    assert result.valid
    sent = engine.calls[-1]["images"]
    assert len(sent) == 2
    assert sent[0] is frames[0].image and sent[1] is frames[1].image


def test_unparseable_answer_is_an_invalid_result_with_the_reason() -> None:
    result = InferencePipeline(ScriptedEngine()).plan(make_observation(command=NavigationCommand.UNKNOWN))
    assert not result.valid
    assert result.waypoints == ()
    assert "unexpected text" in result.reason
    assert result.raw_text == "I cannot plan without a route"


def test_answer_without_end_token_says_so() -> None:
    class Unfinished(ScriptedEngine):
        def generate(self, *args, **kwargs):
            generation = super().generate(*args, **kwargs)
            generation.text, generation.finished = "1.0, 2.0, 3.0", False
            return generation

    config = PlanningConfig(decode=DecodeConfig(max_new_tokens=16))
    result = InferencePipeline(Unfinished(), config).plan(make_observation())
    assert not result.valid
    assert "expected 16 numbers, got 3" in result.reason
    assert "no end token within 16 new tokens" in result.reason


def test_processor_rejections_become_planning_input_errors() -> None:
    class Rejecting(ScriptedEngine):
        def generate(self, *args, **kwargs):
            raise ImageInputError("image aspect ratio 300 exceeds 200 (600x2)")

    with pytest.raises(PlanningInputError, match="aspect ratio"):
        InferencePipeline(Rejecting()).plan(make_observation())
    with pytest.raises(PlanningInputError, match="velocity x is invalid"):
        InferencePipeline(ScriptedEngine()).plan(make_observation(velocity=(math.nan, 0.0)))


def test_engine_errors_propagate() -> None:
    with pytest.raises(RuntimeError, match="scripted engine failure"):
        InferencePipeline(ScriptedEngine()).plan(make_observation(velocity=(99.0, 0.0)))


def test_detection_scales_boxes_to_the_frame() -> None:
    engine = ScriptedEngine()
    config = PlanningConfig(detection_categories=("car", "pedestrian"), detection_max_new_tokens=600)
    frame = make_frame(width=640, height=360)
    result = InferencePipeline(engine, config).detect(frame)
    assert "'car, pedestrian'" in engine.calls[-1]["prompt"]
    assert engine.calls[-1]["decode"].max_new_tokens == 600
    assert [d.label for d in result.detections] == [label for label, _, _ in DETECTION_BOXES]
    car = result.detections[0]
    assert (car.x_min, car.y_min, car.x_max, car.y_max) == pytest.approx((64.0, 72.0, 256.0, 216.0))
    assert car.score is None and result.detections[1].score == pytest.approx(0.8)
    assert (result.width, result.height, result.camera, result.frame_id) == (640, 360, "front", "front_optical")
    assert result.stamp_ns == STAMP and result.reason == ""


def test_vqa_answers_about_all_frames() -> None:
    engine = ScriptedEngine()
    frames = [make_frame(0), make_frame(1, width=160, height=90, camera="left")]
    result = InferencePipeline(engine, PlanningConfig(vqa_max_new_tokens=64)).answer("  What is ahead? ", frames)
    assert engine.calls[-1]["prompt"] == "<image><image>What is ahead?"
    assert engine.calls[-1]["decode"].max_new_tokens == 64
    assert result.answer == "I see 2 image(s), the first is 320x180."  # end token removed
    assert result.cameras == ("front", "left")
    with pytest.raises(PlanningInputError):
        InferencePipeline(engine).answer("why?", [])


def test_planning_config_validates() -> None:
    with pytest.raises(ValueError, match="unknown"):
        PlanningConfig(template="no_such_template")
    with pytest.raises(ValueError, match="category"):
        PlanningConfig(detection_categories=("car", " "))
    with pytest.raises(ValueError, match="waypoint_dt_s"):
        PlanningConfig(waypoint_dt_s=0.0)


# --- the real decoder --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_engine():
    from wam_diff2_ros.core.engine import Engine

    engine = Engine.load(tiny_checkpoint(), device="cpu", dtype="float32")
    yield engine
    engine.close()


def test_real_decoder_random_answer_is_invalid_and_deterministic(tiny_engine) -> None:
    """The random tiny model answers token soup: an invalid plan with a reason; the same observation gives the
    same answer again (what the replay tool relies on)."""
    config = PlanningConfig(decode=DecodeConfig(max_new_tokens=32, denoising_steps=4))
    pipeline = InferencePipeline(tiny_engine, config)
    observation = make_observation()
    first = pipeline.plan(observation)
    second = pipeline.plan(observation)
    assert not first.valid and first.reason
    assert first.raw_text == second.raw_text and first.reason == second.reason
    assert first.model == tiny_engine.name
    assert first.timing.total_ms > 0 and first.timing.denoise_ms > 0 and first.timing.vision_ms > 0
    assert len(first.steps_per_block) == 1 and 1 <= first.steps_per_block[0] <= 4
    assert "The navigation information is: left" in first.prompt


def test_real_decoder_detection_and_vqa_survive_random_text(tiny_engine) -> None:
    config = PlanningConfig(
        decode=DecodeConfig(max_new_tokens=32, denoising_steps=2), detection_max_new_tokens=32, vqa_max_new_tokens=32
    )
    pipeline = InferencePipeline(tiny_engine, config)
    detection = pipeline.detect(make_frame())
    assert detection.detections == () and detection.reason  # no JSON in random text: a reason, no crash
    answer = pipeline.answer("What is ahead?", [make_frame()])
    assert isinstance(answer.answer, str) and answer.timing.total_ms > 0
