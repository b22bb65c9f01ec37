"""Offline evaluation: ego-frame futures from odometry, ADE/FDE, latency, plots."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

from wam_diff2_ros.core.kinematics import check_plan_kinematics
from wam_diff2_ros.replay.evaluation import (
    HORIZONS_S,
    EgoTrack,
    PlanRecord,
    compute_metrics,
    invalid_by_rule,
    to_jsonable,
    write_metrics_json,
)
from wam_diff2_ros.replay.plots import plot_bev, plot_error_over_horizon

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


def straight_track(speed=5.0, yaw=2.0, seconds=10.0, rate=50.0, x0=3.0, y0=-7.0):
    """Constant speed along heading ``yaw``; samples every 1/rate s."""
    t = np.arange(0.0, seconds + 1e-9, 1.0 / rate)
    rows = [(T0 + round(ti * NS), x0 + speed * ti * math.cos(yaw), y0 + speed * ti * math.sin(yaw), yaw) for ti in t]
    return EgoTrack.from_odometry(rows)


def circle_track(radius=20.0, speed=5.0, yaw0=3.0, left=True, seconds=12.0, rate=50.0):
    """Constant-radius turn starting at the origin with heading ``yaw0`` (crosses ±pi)."""
    sign = 1.0 if left else -1.0
    omega = sign * speed / radius
    cx, cy = -sign * radius * math.sin(yaw0), sign * radius * math.cos(yaw0)
    rows = []
    for ti in np.arange(0.0, seconds + 1e-9, 1.0 / rate):
        yaw = yaw0 + omega * ti
        x = cx + sign * radius * math.sin(yaw)
        y = cy - sign * radius * math.cos(yaw)
        rows.append((T0 + round(ti * NS), x, y, math.atan2(math.sin(yaw), math.cos(yaw))))
    return EgoTrack.from_odometry(rows)


# ---------------------------------------------------------------------------------------------
# EgoTrack


def test_straight_line_future_is_speed_times_horizon_straight_ahead():
    track = straight_track(speed=5.0, yaw=2.0)
    future = track.future_in_ego_frame(T0 + 2 * NS)
    expected = np.array([[5.0 * h, 0.0] for h in HORIZONS_S])
    np.testing.assert_allclose(future, expected, atol=1e-9)


def test_interpolates_between_samples_linearly():
    track = straight_track(speed=4.0, yaw=0.0, rate=2.0, x0=0.0, y0=0.0)  # samples every 0.5 s
    x, y, yaw = track.pose_at(T0 + round(1.3 * NS))
    assert x == pytest.approx(5.2) and y == pytest.approx(0.0) and yaw == pytest.approx(0.0)
    future = track.future_in_ego_frame(T0 + round(1.3 * NS), (0.25, 1.1))
    np.testing.assert_allclose(future, [[1.0, 0.0], [4.4, 0.0]], atol=1e-9)


@pytest.mark.parametrize("left", [True, False])
def test_constant_radius_turn_future_matches_the_circle(left):
    radius, speed = 20.0, 5.0
    track = circle_track(radius=radius, speed=speed, left=left)
    t_plan = T0 + 3 * NS
    future = track.future_in_ego_frame(t_plan)
    sign = 1.0 if left else -1.0
    expected = []
    for h in HORIZONS_S:
        angle = speed * h / radius
        expected.append([radius * math.sin(angle), sign * radius * (1 - math.cos(angle))])
    np.testing.assert_allclose(future, expected, atol=1e-6)


def test_yaw_interpolation_takes_the_short_way_across_pi():
    track = EgoTrack.from_odometry([(T0, 0.0, 0.0, 3.1), (T0 + NS, 0.0, 0.0, -3.1)], max_gap_s=2.0)
    _, _, yaw = track.pose_at(T0 + NS // 2)
    assert abs(abs(yaw) - math.pi) < 1e-9  # halfway between 3.1 and -3.1 the short way is pi, not 0


def test_future_past_the_end_is_nan_and_outside_is_none():
    track = straight_track(seconds=10.0)
    future = track.future_in_ego_frame(T0 + round(7.6 * NS))  # 2.4 s of future left
    assert np.isfinite(future[:4]).all()  # 0.5 .. 2.0 s
    assert np.isnan(future[4:]).all()  # 2.5 .. 4.0 s
    assert track.future_in_ego_frame(T0 - NS) is None
    assert track.future_in_ego_frame(T0 + 11 * NS) is None


def test_no_interpolation_across_gaps():
    rows = [(T0 + k * NS // 10, 0.1 * k, 0.0, 0.0) for k in range(10)]
    rows += [(T0 + 3 * NS + k * NS // 10, 3.0 + 0.1 * k, 0.0, 0.0) for k in range(10)]
    track = EgoTrack.from_odometry(rows, max_gap_s=0.5)
    assert track.pose_at(T0 + 2 * NS) is None
    assert track.pose_at(T0 + NS // 2) is not None


def test_from_odometry_sorts_and_drops_duplicate_stamps():
    rows = [(T0 + NS, 1.0, 0.0, 0.0), (T0, 0.0, 0.0, 0.0), (T0 + NS, 9.0, 9.0, 0.0)]
    track = EgoTrack.from_odometry(rows)
    assert track.stamps_ns.tolist() == [T0, T0 + NS]
    assert track.x.tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    "rows, message",
    [
        ([(T0, 0.0, 0.0, 0.0)], "at least 2"),
        ([(T0, 0.0, 0.0, 0.0), (T0 + NS, float("nan"), 0.0, 0.0)], "non-finite"),
        ([(T0, 0.0, 0.0), (T0 + NS, 1.0, 0.0)], "neither"),
        ([(T0, 0.0, 0.0, 0.0), (T0, 1.0, 0.0, 0.0)], "distinct"),
    ],
)
def test_bad_odometry_is_rejected_clearly(rows, message):
    with pytest.raises(ValueError, match=message):
        EgoTrack.from_odometry(rows)


def test_from_real_odometry_messages():
    odometry = pytest.importorskip("nav_msgs.msg")
    msgs = []
    for k in range(5):
        m = odometry.Odometry()
        m.header.stamp.sec = 1_700_000_000 + k
        m.pose.pose.position.x = float(k)
        yaw = math.pi / 2
        m.pose.pose.orientation.z = math.sin(yaw / 2)
        m.pose.pose.orientation.w = math.cos(yaw / 2)
        msgs.append(m)
    track = EgoTrack.from_odometry(msgs, max_gap_s=2.0)
    x, y, yaw = track.pose_at(T0 + 2 * NS + NS // 2)
    assert (x, y) == pytest.approx((2.5, 0.0))
    assert yaw == pytest.approx(math.pi / 2)
    # Moving along +x while facing +y: the future is to the ego's right.
    future = track.future_in_ego_frame(T0 + NS, (1.0,))
    np.testing.assert_allclose(future, [[0.0, -1.0]], atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Metrics


def truth_plan(track, stamp, offset=(0.0, 0.0), **kw):
    waypoints = track.future_in_ego_frame(stamp) + np.asarray(offset)
    return PlanRecord(stamp_ns=stamp, valid=True, waypoints=waypoints, **kw)


def test_constant_offset_gives_that_error_at_every_horizon():
    track = straight_track()
    plans = [truth_plan(track, T0 + k * NS, offset=(0.0, 0.5)) for k in range(1, 5)]
    m = compute_metrics(plans, track)
    for h in ("1s", "2s", "3s", "4s"):
        assert m[f"ade_{h}"] == pytest.approx(0.5)
        assert m[f"fde_{h}"] == pytest.approx(0.5)
        assert m[f"count_{h}"] == 4
    assert m["invalid_rate"] == 0.0 and m["num_instants"] == 4


def test_growing_error_gives_hand_computed_ade_and_fde():
    track = circle_track()
    stamp = T0 + 2 * NS
    truth = track.future_in_ego_frame(stamp)
    errors = 0.1 * np.arange(1, 9)  # 0.1 m at 0.5 s ... 0.8 m at 4.0 s, along x
    plan = PlanRecord(stamp, True, truth + np.stack([errors, np.zeros(8)], axis=1))
    m = compute_metrics([plan], track)
    assert m["ade_1s"] == pytest.approx((0.1 + 0.2) / 2)
    assert m["fde_1s"] == pytest.approx(0.2)
    assert m["ade_2s"] == pytest.approx((0.1 + 0.2 + 0.3 + 0.4) / 4)
    assert m["fde_3s"] == pytest.approx(0.6)
    assert m["ade_4s"] == pytest.approx(0.45)
    assert m["fde_4s"] == pytest.approx(0.8)
    assert [p["mean_l2"] for p in m["error_curve"]] == pytest.approx(errors.tolist())


def test_invalid_plans_are_counted_not_scored():
    track = straight_track()
    good = truth_plan(track, T0 + NS, offset=(1.0, 0.0))
    plans = [
        good,
        PlanRecord(T0 + 2 * NS, False, None),
        PlanRecord(T0 + 3 * NS, True, np.zeros((6, 2))),  # wrong number of waypoints
        {"stamp_ns": T0 + 4 * NS, "valid": True, "waypoints": [[float("nan"), 0.0]] * 8},
        {"stamp_ns": T0 + 5 * NS, "valid": True, "waypoints": good.waypoints.tolist()},
    ]
    m = compute_metrics(plans, track)
    assert m["num_instants"] == 5
    assert m["num_invalid"] == 3 and m["num_valid"] == 2
    assert m["invalid_rate"] == pytest.approx(0.6)
    assert sum(m["invalid_reasons"].values()) == 3
    assert m["count_4s"] == 2
    assert m["ade_4s"] == pytest.approx(1.0)


def test_missing_future_at_the_bag_end_is_excluded_per_horizon():
    track = straight_track(seconds=10.0)
    early = truth_plan(track, T0 + NS, offset=(0.0, 1.0))
    late_stamp = T0 + round(7.8 * NS)  # 2.2 s left: 1 s and 2 s horizons only
    late_truth = track.future_in_ego_frame(late_stamp)
    late_wp = np.nan_to_num(late_truth, nan=0.0) + np.array([0.0, 3.0])
    late = PlanRecord(late_stamp, True, late_wp)
    m = compute_metrics([early, late], track)
    assert m["count_1s"] == 2 and m["count_2s"] == 2
    assert m["count_3s"] == 1 and m["count_4s"] == 1
    assert m["fde_2s"] == pytest.approx(2.0)  # mean of 1 and 3
    assert m["fde_4s"] == pytest.approx(1.0)  # the early plan only
    assert [p["count"] for p in m["error_curve"]] == [2, 2, 2, 2, 1, 1, 1, 1]
    outside = compute_metrics([PlanRecord(T0 + 20 * NS, True, np.zeros((8, 2)))], track)
    assert outside["num_without_ground_truth"] == 1 and outside["count_1s"] == 0
    assert outside["ade_1s"] is None


def test_latency_percentiles_in_ms():
    track = straight_track()
    lat = [0.010, 0.020, 0.030, 0.040, 0.100]
    plans = [truth_plan(track, T0 + (k + 1) * NS, latency_s=v) for k, v in enumerate(lat)]
    plans.append(PlanRecord(T0 + 7 * NS, False, None))  # no latency: not counted
    m = compute_metrics(plans, track)
    assert m["latency_ms"]["count"] == 5
    assert m["latency_ms"]["p50"] == pytest.approx(30.0)
    assert m["latency_ms"]["p95"] == pytest.approx(88.0)  # 40 + 0.8 * (100 - 40)
    assert m["latency_ms"]["max"] == pytest.approx(100.0)


def test_metrics_by_command_and_strict_json(tmp_path):
    track = circle_track()
    plans = [
        truth_plan(track, T0 + NS, offset=(0.0, 1.0), command="left"),
        truth_plan(track, T0 + 2 * NS, offset=(0.0, 3.0), command="left"),
        truth_plan(track, T0 + 3 * NS, command="straight"),
        PlanRecord(T0 + 4 * NS, False, None, command="straight"),
    ]
    m = compute_metrics(plans, track, include_instants=True)
    assert m["by_command"]["left"]["ade_4s"] == pytest.approx(2.0)
    assert m["by_command"]["straight"]["fde_4s"] == pytest.approx(0.0, abs=1e-9)
    assert m["by_command"]["straight"]["count"] == 1
    assert len(m["instants"]) == 4
    path = write_metrics_json(m, tmp_path / "metrics.json")
    loaded = json.loads(path.read_text())  # strict JSON: json rejects NaN only when asked, so check text
    assert "NaN" not in path.read_text() and loaded["num_instants"] == 4
    empty = compute_metrics([PlanRecord(T0, False, None)], track)
    json.dumps(empty, allow_nan=False)
    assert empty["ade_4s"] is None and empty["latency_ms"]["p50"] is None


def test_to_jsonable_replaces_nan_and_numpy_types():
    out = to_jsonable({"a": np.float32(1.5), "b": float("nan"), "c": np.array([1.0, np.inf]), "d": (np.int64(3),)})
    assert out == {"a": 1.5, "b": None, "c": [1.0, None], "d": [3]}


def test_unknown_metric_horizon_is_an_error():
    with pytest.raises(ValueError, match="not one of the waypoint times"):
        compute_metrics([], straight_track(), metric_horizons_s=(1.25,))


# ---------------------------------------------------------------------------------------------
# Plots


def _png_stats(path):
    with Image.open(path) as img:
        assert img.format == "PNG"
        arr = np.asarray(img.convert("RGB"), float)
    return img.size, arr.std()


def test_plots_produce_non_empty_pngs(tmp_path):
    track = circle_track(seconds=8.0)
    plans = [
        truth_plan(track, T0 + k * NS // 2, offset=(0.3 * k % 1.0, 0.2), command="left", latency_s=0.05)
        for k in range(1, 8)
    ]
    plans.append(PlanRecord(T0 + 4 * NS + NS // 4, False, None, command="left"))
    late = T0 + round(6.5 * NS)  # future runs past the end
    plans.append(PlanRecord(late, True, np.nan_to_num(track.future_in_ego_frame(late)), command="straight"))
    bev = plot_bev(plans, track, tmp_path / "bev.png", num_panels=6)
    size, spread = _png_stats(bev)
    assert size[0] > 600 and size[1] > 400 and spread > 5.0
    metrics = compute_metrics(plans, track)
    curve = plot_error_over_horizon(metrics, tmp_path / "sub" / "error.png")
    size, spread = _png_stats(curve)
    assert size[0] > 400 and spread > 5.0


def test_plot_bev_needs_predictions_inside_the_track(tmp_path):
    with pytest.raises(ValueError, match="inside the ego track"):
        plot_bev([PlanRecord(0, True, np.zeros((8, 2)))], straight_track(), tmp_path / "x.png")


def test_invalid_plans_are_counted_by_the_kind_of_their_reason():
    track = straight_track()
    plans = [
        {"stamp_ns": T0 + k * NS, "valid": False, "waypoints": None, "reason": reason}
        for k, reason in enumerate(
            [
                "lateral acceleration rule: heading turns 31° by waypoint 5 at 12.3 m/s = 13.1 m/s², above 8 m/s²",
                "lateral acceleration rule: heading turns 27° by waypoint 4 at 9.8 m/s = 9.2 m/s², above 8 m/s²",
                "backward rule: waypoint 3 goes 4.4 m backwards",
            ],
            start=1,
        )
    ]
    plans.append({"stamp_ns": T0 + 5 * NS, "valid": False, "waypoints": None})  # no reason recorded
    reasons = compute_metrics(plans, track)["invalid_reasons"]
    assert sorted(reasons.values()) == [1, 1, 2]
    assert any(kind.startswith("lateral acceleration rule") and count == 2 for kind, count in reasons.items())
    assert reasons["plan marked invalid"] == 1


def _red_pixels(path) -> int:
    """Pixels of matplotlib's tab:red (214, 39, 40), the colour of rejected plans."""
    with Image.open(path) as img:
        arr = np.asarray(img.convert("RGB"), int)
    return int((np.abs(arr - np.array([214, 39, 40])).sum(axis=2) < 30).sum())


def test_plot_bev_draws_a_rejected_plan_and_only_then(tmp_path):
    track = circle_track(seconds=8.0)
    stamp = T0 + 2 * NS
    truth = track.future_in_ego_frame(stamp)
    jumped = truth.copy()
    jumped[6] += (12.0, 0.0)  # waypoint 7 jumps 12 m ahead: the gate rejects the plan
    reason = check_plan_kinematics([tuple(p) for p in jumped], 0.5)
    assert reason
    rejected = PlanRecord(stamp, False, None, command="left", reason=reason, rejected=jumped)
    valid = PlanRecord(stamp + NS, True, track.future_in_ego_frame(stamp + NS), command="left")
    with_rejected = plot_bev([rejected, valid], track, tmp_path / "with.png", num_panels=2)
    without_points = plot_bev(
        [PlanRecord(stamp, False, None, command="left", reason=reason), valid],
        track,
        tmp_path / "without.png",
        num_panels=2,
    )
    assert _red_pixels(with_rejected) > 200
    assert _red_pixels(without_points) == 0


def test_plan_records_carry_the_rejected_waypoints_and_reason():
    record = PlanRecord.coerce(
        {"stamp_ns": T0, "valid": False, "waypoints": None, "reason": "r", "rejected": [[1.0, 0.0]] * 8}
    )
    assert record.reason == "r" and record.rejected.shape == (8, 2)
    assert PlanRecord.coerce({"stamp_ns": T0, "valid": True, "waypoints": [[1.0, 0.0]] * 8}).rejected is None


def test_invalid_plans_are_grouped_by_rule_with_the_worst_case_of_each():
    def turn(speed, curvature):  # a constant-curvature path at `speed`
        heading, x, y, points = 0.0, 0.0, 0.0, []
        for _ in range(8):
            for _ in range(50):
                x += speed * math.cos(heading) * 0.01
                y += speed * math.sin(heading) * 0.01
                heading += speed * curvature * 0.01
            points.append((round(x, 2), round(y, 2)))
        return check_plan_kinematics(points, 0.5)

    mild, harsh = turn(15.0, 0.06), turn(15.0, 0.1)  # 13.5 and 22.5 m/s² lateral
    backward = check_plan_kinematics([(2.0, 0.0), (4.0, 0.0), *[(2.5, 0.0)] * 6], 0.5)
    groups = invalid_by_rule([mild, backward, harsh, mild, "expected 16 numbers, got 15", None])
    assert next(iter(groups)) == "lateral acceleration"
    assert groups["lateral acceleration"] == {"count": 3, "worst": harsh}
    assert groups["backward"] == {"count": 1, "worst": backward}
    assert "1.50 m behind" in backward
    kinds = [key for key in groups if key not in ("lateral acceleration", "backward")]
    assert len(kinds) == 2 and "plan marked invalid" in kinds
    assert groups["plan marked invalid"]["count"] == 1
