"""Candidate plans through the node's runtime (no DDS): PlannedTrajectory's candidates, the faint markers, the
replay's record, and the parameters' refusals (what the live guard also answers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import tiny_checkpoint
from nav_msgs.msg import Odometry
from node_helpers import rgb_image_msg
from scripted_engine import ScriptedEngine, ScriptedGeneration
from std_msgs.msg import String
from visualization_msgs.msg import Marker

from wam_diff2_ros.core.units import NS_PER_MS
from wam_diff2_ros.replay.records import json_line, plan_record
from wam_diff2_ros.ros.candidate_outputs import CANDIDATES_NS
from wam_diff2_ros.ros.conversions import ns_to_stamp
from wam_diff2_ros.ros.params import NodeConfig, ParameterError, change_problems
from wam_diff2_ros.ros.runtime import PlannerRuntime

T0 = 1_700_000_000 * 1_000_000_000
IMAGE = np.random.default_rng(5).integers(0, 256, size=(180, 320, 3), dtype=np.uint8)


class GreedyWrongEngine(ScriptedEngine):
    """No batch (the pipeline asks row after row): the greedy row answers too few numbers, sampled rows the
    scripted plan."""

    def generate(self, prompt, images=(), decode=None, system=None, started_ns=None):
        answer = super().generate(prompt, images, decode, system, started_ns)
        return answer if decode.temperature > 0 else ScriptedGeneration("1.00, 2.00, 3.00")


def values(**overrides):
    return {"model.path": str(tiny_checkpoint()), **overrides}


def planned_cycle(candidates: int, frame: str = "odom", **overrides):
    parameters = values(**{"planning.candidates": candidates, **overrides})
    runtime = PlannerRuntime(NodeConfig.from_parameters(parameters), GreedyWrongEngine(), lambda: T0)
    for k in range(51):
        stamp = T0 - (50 - k) * 20 * NS_PER_MS
        odometry = Odometry()
        odometry.header.stamp = ns_to_stamp(stamp)
        odometry.header.frame_id, odometry.child_frame_id = frame, "base_link"
        odometry.pose.pose.position.x, odometry.pose.pose.orientation.w = 100.0, 1.0
        odometry.twist.twist.linear.x = 6.0
        runtime.on_odometry(odometry, stamp)
    runtime.on_command(String(data="straight"), T0)
    runtime.on_image(0, rgb_image_msg(IMAGE, ns_to_stamp(T0)), T0)
    return runtime, runtime.plan(T0)


def test_every_candidate_is_in_the_trajectories_and_the_unpublished_ones_are_drawn_faintly() -> None:
    runtime, cycle = planned_cycle(3)
    assert cycle.path is not None and cycle.result.chosen_candidate == 1  # greedy rejected, first sampled wins
    if runtime.msgs is not None:
        trajectory, fixed = cycle.trajectory, cycle.trajectory_fixed
        assert trajectory.chosen_candidate == 1 and len(trajectory.candidates) == 3
        rejected, chosen, other = trajectory.candidates
        assert not rejected.valid and "expected 16 numbers" in rejected.invalid_reason and not rejected.points
        assert rejected.temperature == 0.0 and chosen.temperature == pytest.approx(1.0)
        assert chosen.valid and len(chosen.points) == 8 and chosen.raw_text == trajectory.raw_text
        assert [p.pose.position.x for p in chosen.points] == [p.pose.position.x for p in trajectory.points]
        # the fixed trajectory's candidates are in the odometry's frame: moved by the ego's 100 m
        assert fixed.candidates[1].points[0].pose.position.x == pytest.approx(chosen.points[0].pose.position.x + 100)
        assert other.index == 2 and other.valid
    faint = {m.id: m for m in cycle.markers.markers if m.ns == CANDIDATES_NS}
    assert sorted(faint) == [0, 1, 2]
    assert faint[0].action == Marker.DELETE and faint[1].action == Marker.DELETE  # no waypoints / the published one
    assert faint[2].action == Marker.ADD and faint[2].color.a < 0.5 and len(faint[2].points) == 9
    record = json.loads(json_line(plan_record(0, T0, T0, cycle, 1.0)))
    assert record["chosen_candidate"] == 1 and [c["valid"] for c in record["candidates"]] == [False, True, True]
    assert record["candidates"][1]["waypoints"] == record["waypoints"]


def test_one_candidate_adds_nothing() -> None:
    runtime, cycle = planned_cycle(1)
    assert cycle.path is None and not cycle.result.valid  # the greedy answer alone: no plan
    assert not [m for m in cycle.markers.markers if m.ns == CANDIDATES_NS]
    record = plan_record(0, T0, T0, cycle, 1.0)
    assert "candidates" not in record and "chosen_candidate" not in record
    if runtime.msgs is not None:
        assert list(cycle.trajectory.candidates) == [] and cycle.trajectory.chosen_candidate == -1


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"planning.candidates": 0}, "planning.candidates: must be >= 1, got 0"),
        ({"planning.candidates": 17}, "planning.candidates: must be <= 16, got 17"),
        (
            {"planning.candidates": 4, "planning.candidate_temperature": 0.0},
            "planning.candidate_temperature must be > 0 with planning.candidates > 1",
        ),
    ],
)
def test_bad_candidate_settings_are_refused_with_the_reason(changes, reason) -> None:
    with pytest.raises(ParameterError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        NodeConfig.from_parameters(values(**changes))
    current = {**NodeConfig.from_parameters(values()).values}
    assert any(reason in problem for problem in change_problems(current, changes))


def test_every_valid_candidate_is_offered_to_autoware_under_one_generator() -> None:
    pytest.importorskip("autoware_internal_planning_msgs", reason="autoware messages: run wam-diff2-build-interfaces")
    _, cycle = planned_cycle(3, "map", **{"autoware.outputs": True})
    assert cycle.path is not None and cycle.result.chosen_candidate == 1
    offered = cycle.autoware_candidates.candidate_trajectories
    assert len(offered) == 2  # the two valid candidates; the greedy row the gate rejected is not offered
    (generator,) = cycle.autoware_candidates.generator_info
    assert all(list(c.generator_id.uuid) == list(generator.generator_id.uuid) for c in offered)
    assert generator.generator_name.data == "wam_diff2"
    first = [(p.pose.position.x, p.pose.position.y) for p in offered[0].points]
    assert first == [(p.pose.position.x, p.pose.position.y) for p in cycle.autoware_trajectory.points]
    assert all(len(c.points) == 9 and c.header.frame_id == "map" for c in offered)
