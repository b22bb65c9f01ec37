"""Closed-loop parts without a model: the vehicle's limits, the tracker on a known path, the PDMS terms on
constructed episodes (hand-computed values), the scenario format's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wam_diff2_ros.drive.controller import PlanTrack, Tracker, pursuit_point
from wam_diff2_ros.drive.idm import idm_rollout
from wam_diff2_ros.drive.score import (
    COMFORT_BOUNDS,
    EpisodeScorer,
    Trace,
    box_corners,
    comfort_terms,
    episode_terms,
    polygons_intersect,
    window_count,
)
from wam_diff2_ros.drive.vehicle import Vehicle, VehicleLimits, VehicleState
from wam_diff2_ros.drive.world import VALIDATION, ScenarioError, build_world, load_scenarios, parse_scenario

DT = 0.02


def test_vehicle_respects_steering_rate_jerk_and_acceleration_limits() -> None:
    lim = VehicleLimits()
    car = Vehicle(VehicleState(0.0, 0.0, 0.0, 10.0), lim)
    previous = car.state
    for _ in range(150):
        state = car.step(steer_cmd=1.0, accel_cmd=-20.0, dt=DT)
        assert abs(state.delta - previous.delta) <= lim.steer_rate * DT + 1e-12
        if state.v > 0:  # standing still, the ground takes the braking force at once
            assert abs(state.a - previous.a) <= lim.jerk * DT + 1e-12
        assert lim.brake - 1e-12 <= state.a <= lim.accel + 1e-12
        assert abs(state.delta) <= lim.max_steer + 1e-12
        assert state.v >= 0.0
        previous = state
    assert car.state.delta == pytest.approx(lim.max_steer)
    assert car.state.v == 0.0  # braked to a stop, never reversing


def test_vehicle_drives_the_bicycle_circle() -> None:
    lim = VehicleLimits()
    delta = 0.1
    car = Vehicle(VehicleState(0.0, 0.0, 0.0, 5.0, 0.0, delta), lim)
    for _ in range(500):
        car.step(delta, 0.0, DT)
    radius = lim.wheelbase / math.tan(delta)
    # the rear axle stays on the circle of radius L / tan(delta) about (0, R)
    assert math.hypot(car.state.x, car.state.y - radius) == pytest.approx(radius, abs=1e-6)
    assert car.state.v == pytest.approx(5.0)


def test_tracker_follows_a_circular_plan() -> None:
    radius, speed = 30.0, 8.0
    t = np.arange(0.0, 12.01, 0.5)
    phi = speed * t / radius
    plan = PlanTrack(t, radius * np.sin(phi), radius * (1 - np.cos(phi)), 0.0)
    tracker = Tracker()
    tracker.submit(plan)
    car = Vehicle(VehicleState(0.0, 0.0, 0.0, speed))
    errors = []
    for k in range(int(10.0 / DT)):
        steer, accel, following = tracker.command(k * DT, car.state)
        assert following
        state = car.step(steer, accel, DT)
        if k * DT > 2.0:
            errors.append(abs(math.hypot(state.x, state.y - radius) - radius))
            assert state.v == pytest.approx(speed, abs=0.3)
    assert max(errors) < 0.5  # pure pursuit cuts inside by about Ld²/2R at most


def test_tracker_brakes_comfortably_when_the_plan_runs_out() -> None:
    plan = PlanTrack(np.array([0.0, 1.0]), np.array([0.0, 10.0]), np.array([0.0, 0.0]), 0.0)
    tracker = Tracker()
    tracker.submit(plan)
    car = Vehicle(VehicleState(0.0, 0.0, 0.0, 10.0))
    for k in range(int(8.0 / DT)):
        steer, accel, following = tracker.command(k * DT, car.state)
        assert following == (k * DT <= 1.0)
        car.step(steer, accel, DT)
        assert car.state.a >= -2.0 - 1e-9
    assert car.state.v == 0.0
    assert abs(car.state.y) < 1e-6


def test_pursuit_point_is_at_the_lookahead_distance() -> None:
    xs, ys = np.array([0.0, 10.0, 20.0]), np.array([0.0, 0.0, 0.0])
    gx, gy = pursuit_point(xs, ys, 2.0, 1.0, 5.0)
    assert math.hypot(gx - 2.0, gy - 1.0) == pytest.approx(5.0)
    assert gy == pytest.approx(0.0)
    gx, gy = pursuit_point(xs, ys, 19.0, 0.0, 5.0)  # beyond the end: extended straight
    assert (gx, gy) == pytest.approx((24.0, 0.0))


def test_box_intersection() -> None:
    a = box_corners(0.0, 0.0, 0.0, 2.0, 1.0)
    assert polygons_intersect(a, box_corners(3.9, 0.0, 0.0, 2.0, 1.0))
    assert not polygons_intersect(a, box_corners(4.1, 0.0, 0.0, 2.0, 1.0))
    assert not polygons_intersect(a, box_corners(3.0, 3.0, math.pi / 4, 2.0, 0.5))


def _straight_world(**extra):
    spec = parse_scenario({"name": "t", "road": [{"straight": 600}], "speed_mps": 10, "scenery": False, **extra})
    return build_world(spec)


def _episode(world, speed: float, seconds: float, d: float = 0.0, accel: float = 0.0):
    """A constructed trace at 10 Hz: straight along the lane at ``d`` with constant acceleration from ``speed``."""
    scorer = EpisodeScorer(world)
    trace, samples = Trace(), []
    x, v = 0.0, speed
    for k in range(round(seconds / 0.1) + 1):
        t = k * 0.1
        state = VehicleState(x, d, 0.0, v, accel if v > 0 else 0.0)
        trace.t.append(t)
        trace.states.append(state)
        trace.yaw_rate.append(0.0)
        samples.append(scorer.sample_geometry(t, state, x))
        x += v * 0.1 + accel * 0.005
        v = max(0.0, v + accel * 0.1)
    return scorer.score(trace, samples)


def test_pdms_of_a_perfect_drive_is_one() -> None:
    score = _episode(_straight_world(), 10.0, 8.0)
    assert [score[k] for k in ("nc", "dac", "ep", "ttc", "c", "pdms")] == pytest.approx([1, 1, 1, 1, 1, 1], abs=1e-9)
    assert len(score["windows"]) == 2
    assert score["lane_deviation_m"]["max"] == pytest.approx(0.0, abs=1e-6)


def test_pdms_half_progress_is_hand_computed() -> None:
    score = _episode(_straight_world(), 5.0, 4.0)  # 20 m at 5 m/s; IDM from 5 m/s towards the route's 10 goes further
    window = score["windows"][0]
    reference = idm_rollout(_straight_world(), -VehicleLimits().centre_offset, 5.0, 0.0, 4.0)
    assert window["progress_m"] == pytest.approx(20.0, abs=1e-6)
    assert window["reference_progress_m"] == pytest.approx(reference.progress_m, abs=1e-6)
    # IDM accelerates at most 1.5 m/s² and less as it nears 10 m/s: between 20 m and 20 + 0.75 * 16 m
    assert 22.0 < window["reference_progress_m"] < 32.0
    ep = 20.0 / window["reference_progress_m"]
    assert window["ep"] == pytest.approx(ep)
    assert score["pdms"] == pytest.approx((5 * ep + 5 * 1 + 2 * 1) / 12)


def _follow(world, rollout, seconds: float):
    """A constructed trace that drives ``rollout`` (rear axle s, v along the straight lane) at 10 Hz."""
    scorer = EpisodeScorer(world)
    trace, samples = Trace(), []
    for k in range(round(seconds / 0.1) + 1):
        t = k * 0.1
        x = float(np.interp(t, rollout.t, rollout.s))
        v = float(np.interp(t, rollout.t, rollout.v))
        a = float(np.interp(t, rollout.t[:-1], np.diff(rollout.v) / np.diff(rollout.t)))
        state = VehicleState(x, 0.0, 0.0, v, a)
        trace.t.append(t)
        trace.states.append(state)
        trace.yaw_rate.append(0.0)
        samples.append(scorer.sample_geometry(t, state, x))
    return scorer.score(trace, samples)


def test_ego_progress_from_standstill_of_a_perfect_planner_is_one() -> None:
    world = _straight_world()
    rollout = idm_rollout(world, 0.0, 0.0, 0.0, 8.0)  # IDM from standstill, re-planned at each window's start
    score = _follow(world, rollout, 8.0)
    assert rollout.v[-1] > 8.0  # it does get going
    assert [w["ep"] for w in score["windows"]] == pytest.approx([1.0, 1.0], abs=0.02)
    # the route's speed from the window's start (the old allowance) would have given ~0.6 in the first window
    assert score["windows"][0]["progress_m"] < 0.7 * 40.0


def test_ego_progress_behind_a_slower_lead_does_not_reward_tailgating() -> None:
    world = _straight_world(lead={"gap_m": 30, "speed_mps": 5})
    follower = _follow(world, idm_rollout(world, 0.0, 5.0, 0.0, 8.0), 8.0)
    assert follower["nc"] == 1.0 and follower["ep"] == pytest.approx(1.0, abs=0.02)
    # a tailgater closes up to 2 m behind the lead at its speed: more progress, no better EP
    lead_rear = 30.0 - world.obstacles[0].half_length
    close = lead_rear - 2.0 - VehicleLimits().front_length
    ts = np.arange(0.0, 8.05, 0.1)
    s = np.minimum(ts * 8.0, close + 5.0 * ts)
    tailgater = _follow(world, type("R", (), {"t": ts, "s": s, "v": np.gradient(s, ts)})(), 8.0)
    assert tailgater["windows"][0]["progress_m"] > follower["windows"][0]["progress_m"]
    assert tailgater["ep"] <= follower["ep"] + 1e-9


def test_pdms_off_road_is_zero() -> None:
    score = _episode(_straight_world(), 10.0, 4.0, d=-2.0)  # the right corners at -3.15 m, asphalt ends at -2.6
    assert score["dac"] == 0.0 and score["pdms"] == 0.0
    assert score["lane_deviation_m"]["mean"] == pytest.approx(2.0, abs=1e-6)
    assert any(e["kind"] == "off_road" for e in score["events"])
    assert _episode(_straight_world(), 10.0, 4.0, d=-1.3)["dac"] == 1.0  # corners at -2.45: still on the asphalt


def test_pdms_collision_with_a_stopped_vehicle_is_zero_and_ttc_sees_it_first() -> None:
    world = _straight_world(stopped={"s_m": 40.0})
    score = _episode(world, 10.0, 4.0)
    window = score["windows"][0]
    assert window["nc"] == 0.0 and window["pdms"] == 0.0
    assert window["ttc"] == 0.0
    first = min(e["t"] for e in score["events"] if e["kind"] == "contact")
    # the front bumper (4.049 m ahead of the rear axle) meets the car's rear at 40 - half length
    rear = 40.0 - world.obstacles[0].half_length
    assert first == pytest.approx(math.ceil((rear - 4.049) / 10.0 * 10) / 10, abs=0.101)


def test_pdms_comfort_violation_costs_the_comfort_weight() -> None:
    score = _episode(_straight_world(), 25.0, 4.0, accel=-5.0)  # beyond NAVSIM's -4.05 m/s²
    window = score["windows"][0]
    assert window["c"] == 0.0
    assert window["comfort"]["lon_accel"] == pytest.approx(-5.0, abs=1e-6)
    assert window["pdms"] == pytest.approx((5 * window["ep"] + 5 * window["ttc"]) / 12)


def test_comfort_terms_from_a_polynomial_fit() -> None:
    t = np.arange(0.0, 4.01, 0.1)
    yaw = 0.3 * t**2  # yaw rate 0.6 t: 2.4 rad/s at the end, yaw acceleration 0.6 rad/s²
    states = [VehicleState(0.0, 0.0, float(h), 1.0) for h in yaw]
    terms = comfort_terms(t, states, np.zeros_like(t))
    assert terms["yaw_rate"] == pytest.approx(2.4, abs=1e-6)
    assert terms["yaw_accel"] == pytest.approx(0.6, abs=1e-6)
    assert not COMFORT_BOUNDS["yaw_rate"][0] < terms["yaw_rate"] < COMFORT_BOUNDS["yaw_rate"][1]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "road": [{"straight": 600}], "speeed_mps": 5}, "unknown key(s) ['speeed_mps']"),
        ({"name": "x", "road": [{"straight": 600}], "start": {"offset": 1}}, "unknown key(s) ['offset']"),
        ({"name": "x", "road": [{"straight": 100}], "speed_mps": 10}, "the route leaves the road"),
        ({"name": "x", "road": [{"straight": 600}], "start": {"offset_m": -2.0}}, "the route leaves the road"),
        ({"name": "x", "road": [{"left": {"radius_m": 20}}]}, "angle_deg: expected a number"),
        ({"name": "x", "road": "highway"}, "'road' must be"),
    ],
)
def test_bad_scenarios_are_refused_with_the_reason(entry: dict, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        build_world(parse_scenario(entry))
    assert message in str(info.value)


def test_validation_scenarios_are_apart_from_the_reported_ones_and_the_training_drives() -> None:
    from wam_diff2_ros.demo.train import config

    validation, reported = load_scenarios(VALIDATION), load_scenarios("all")
    assert len(validation) >= 10
    seeds = {s.seed for s in validation}
    assert len(seeds) == len(validation) and not seeds & {s.seed for s in reported}
    drives = {*config.DRIVE_SAMPLE_SEEDS, *config.TRAIN_DRIVE_SEEDS}
    assert not seeds & (drives | {*config.VALIDATION_DRIVE_SEEDS, *config.TEST_DRIVE_SEEDS})
    kinds = {p[0] for s in validation for p in s.road}
    assert {"straight", "left", "right"} <= kinds and any(s.lead for s in validation)
    assert any(s.stopped_s_m for s in validation) and any(s.start_offset_m for s in validation)
    for spec in validation:
        build_world(spec)


def test_builtin_scenarios_cover_the_required_kinds() -> None:
    specs = load_scenarios("all")
    assert len(specs) >= 13 and specs[0].road == "sample"
    assert all(s.seed >= 5000 for s in specs)
    speeds = {s.speed_mps for s in specs if s.road != "sample"}
    assert min(speeds) == 5 and max(speeds) == 15
    kinds = {p[0] for s in specs if s.road != "sample" for p in s.road}
    assert {"straight", "left", "right"} <= kinds
    assert any(s.lead for s in specs) and any(s.stopped_s_m for s in specs)
    assert any(s.start_offset_m for s in specs)
    for spec in specs:
        build_world(spec)
    with pytest.raises(ScenarioError, match="no scenario 'nope'"):
        load_scenarios("nope")


def test_an_early_ended_episode_has_a_completion_and_its_terms_report_only_what_happened() -> None:
    assert (window_count(10.0), window_count(9.6), window_count(8.5), window_count(8.0)) == (3, 3, 2, 2)
    perfect = {k: 1.0 for k in ("nc", "dac", "ep", "ttc", "c", "pdms")}
    assert episode_terms([perfect, perfect])["pdms"] == 1.0
    ended = episode_terms([perfect, {**perfect, "dac": 0.0, "pdms": 0.0}], planned_s=20.0)
    assert ended["windows_not_driven"] == 3 and ended["completion"] == pytest.approx(2 / 5)
    assert ended["pdms"] == pytest.approx(1 / 5)  # the windows not driven count as 0 in the PDMS only
    assert ended["dac"] == pytest.approx(1 / 2)  # one of the two windows driven left the road
    assert ended["nc"] == 1.0  # no collision happened: none is reported


def test_obstacle_boxes_are_the_parts_near_the_ground() -> None:
    world = build_world(parse_scenario({"name": "t", "road": [{"straight": 600}], "stopped": {"s_m": 50.0}}))
    poles = [ob for ob in world.obstacles if any(c[2] > 6.0 for c, _, _ in ob.actor.parts)]  # street lights
    assert poles and all(ob.half_width == pytest.approx(0.08) for ob in poles)  # the post, not its arm
    assert all(ob.half_width < 0.2 for ob in world.obstacles if not ob.agent)  # posts and trunks
    (stopped,) = [ob for ob in world.obstacles if ob.agent and ob.actor.pose(0.0)[1] == pytest.approx(0.0)]
    assert 2.0 < stopped.half_length < 2.5 and 0.85 < stopped.half_width < 1.0  # the car's body
