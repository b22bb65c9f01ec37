"""Training instants at any speed and pose (``demo/train/speeds.py``) and the held-out drive sets: every answer
passes the kinematic gate, speeds from standing to above 10 m/s, x crossing the decades, recovery poses steer
back, mirrored copies, the options that ask without lateral acceleration and keep clear of the traffic, and the
validation / test / training drive seeds never meet."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.demo.train import config
from wam_diff2_ros.demo.train.evaluate import speed_bands
from wam_diff2_ros.demo.train.speeds import (
    PoseRenderer,
    draw_instant,
    lateral_return,
    path_is_clear,
    speed_samples,
)
from wam_diff2_ros.sim.scenario import Scenario

pytestmark = pytest.mark.core


@pytest.fixture(scope="module")
def samples():
    return speed_samples([7, 8], 40, seed=3, sizes=((160, 90),))


def test_every_answer_passes_the_gate_and_the_speeds_span_the_range(samples) -> None:
    pool, drawn = samples
    assert len(drawn) == 2 * 2 * 40 and len(pool.images) == len(drawn)
    speeds = np.array([s.speed for s in drawn])
    assert speeds.min() < 0.5 and speeds.max() > 12.0
    assert ((speeds > 10.0).mean() > 0.15) and ((speeds < 2.0).mean() > 0.1)
    for sample in drawn:
        assert parse_waypoints(sample.answer, current_speed_mps=sample.speed).valid, sample.answer
    far_x = [s.waypoints[-1][0] for s in drawn]
    for decade in (10.0, 20.0, 30.0, 40.0, 50.0):  # the final x lies on both sides of every decade
        assert min(far_x) < decade < max(far_x)
        assert any(decade - 3 < x < decade + 3 for x in far_x)


def test_mirrored_copies_swap_the_command_and_negate_y(samples) -> None:
    pool, drawn = samples
    commands = {s.command for s in drawn}
    assert {"left", "right", "straight"} <= commands
    for original, mirrored in zip(drawn[::2], drawn[1::2], strict=True):
        assert {"left": "right", "right": "left"}.get(original.command, original.command) == mirrored.command
        assert [(x, -y if y else 0.0) for x, y in original.waypoints] == list(mirrored.waypoints)
        assert mirrored.acceleration[1] == -original.acceleration[1]
        assert np.array_equal(pool.images[original.image_index][:, ::-1], pool.images[mirrored.image_index])


def test_a_recovery_pose_steers_back_to_the_lane_centre() -> None:
    u = np.array([0.0, 5.0, 10.0, 20.0, 30.0])
    lateral = lateral_return(u, 1.0, math.radians(3.0), 20.0)
    assert lateral[0] == pytest.approx(1.0) and lateral[-2:] == pytest.approx([0.0, 0.0])
    assert abs(lateral[2]) < 1.0
    slope = (lateral_return(np.array([1e-4]), 1.0, 0.05, 20.0)[0] - 1.0) / 1e-4
    assert slope == pytest.approx(math.tan(0.05), rel=1e-3)


def test_the_pose_renderer_sees_from_the_pose_it_is_given() -> None:
    scenario = Scenario(25.0, 5)
    renderer = PoseRenderer(scenario, 160, 90)
    x, y, yaw = (float(v[0]) for v in scenario.ego_pose_at_s(np.array([20.0])))
    renderer.pose = (x, y, yaw)
    centred = renderer.render(scenario.t_at_s(20.0)).astype(int)
    renderer.pose = (x, y, yaw + math.radians(8.0))
    turned = renderer.render(scenario.t_at_s(20.0)).astype(int)
    assert np.abs(centred - turned).mean() > 5.0


def test_held_out_seeds_never_meet_the_training_seeds() -> None:
    trained = set(config.DRIVE_SAMPLE_SEEDS) | set(config.TRAIN_DRIVE_SEEDS)
    validation, test = set(config.VALIDATION_DRIVE_SEEDS), set(config.TEST_DRIVE_SEEDS)
    assert not (trained & validation) and not (trained & test) and not (validation & test)
    assert max(validation | test) < 5000  # seeds from 5000 on belong to the closed-loop scenarios


def test_speed_bands_count_plans_gate_and_ade() -> None:
    rows = [
        {"speed": 1.0, "plausible": True, "gate_ade": 0.5},
        {"speed": 1.5, "plausible": False},
        {"speed": 12.0, "plausible": True, "gate_ade": 2.0},
        {"speed": 16.0, "plausible": True, "gate_ade": 3.0},
    ]
    bands = speed_bands(rows)
    assert [b["plans"] for b in bands] == [2, 0, 0, 1, 1]
    assert bands[0]["plausible_rate"] == 0.5 and bands[0]["ade_m"] == 0.5
    assert bands[1]["plausible_rate"] is None and bands[4]["speed_m_s"] == [15.0, None]


def test_a_blind_share_asks_the_same_instants_without_their_lateral_acceleration(samples) -> None:
    _, drawn = samples
    _, blind = speed_samples([7, 8], 40, seed=3, sizes=((160, 90),), blind_lateral=1.0)
    assert [s.waypoints for s in blind] == [s.waypoints for s in drawn]
    assert [(s.speed, s.command, s.acceleration[0]) for s in blind] == [
        (s.speed, s.command, s.acceleration[0]) for s in drawn
    ]
    assert max(abs(s.acceleration[1]) for s in drawn) > 1.0  # in the turn
    assert max(abs(s.acceleration[1]) for s in blind) < 0.6  # as if going straight


def test_a_clear_path_refuses_an_answer_through_the_lead_car_and_keeps_one_behind_it() -> None:
    scenario = Scenario(config.DRIVE_SECONDS, 7)
    lead = next(a for a in scenario.actors if a.static_xy is None)  # the lead car is the first moving actor
    t0 = 5.0
    times = t0 + config.WAYPOINT_DT * np.arange(1, config.NUM_WAYPOINTS + 1)

    def path(behind_m: float) -> dict:
        poses = [lead.pose(float(t)) for t in times]
        return {
            "time_s": t0,
            "path_world": np.array([(x - behind_m * math.cos(h), y - behind_m * math.sin(h), h) for x, y, h in poses]),
        }

    assert not path_is_clear(scenario, path(4.0))
    assert path_is_clear(scenario, path(30.0))


def test_only_answers_at_speed_reach_the_traffic() -> None:
    scenario = Scenario(config.DRIVE_SECONDS, 7)
    rng = np.random.default_rng(11)
    instants = [i for i in (draw_instant(scenario, rng) for _ in range(80)) if i is not None]
    blocked = [i["speed"] for i in instants if not path_is_clear(scenario, i)]
    assert 0 < len(blocked) < len(instants) / 2
    assert min(blocked) > 3.0  # slower answers stay behind the lead car
