"""The route rule (core/route_command.py) and the shared command hold."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wam_diff2_ros.core.frames import EgoPose
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.core.route_command import RouteError, RouteRule, route_command, to_ego_frame
from wam_diff2_ros.core.turn_signal import CommandHold

pytestmark = pytest.mark.core

LEFT, STRAIGHT, RIGHT = NavigationCommand.LEFT, NavigationCommand.STRAIGHT, NavigationCommand.RIGHT


def _arc(sign: float, radius: float = 15.0, length: float = 60.0) -> np.ndarray:
    """A route that runs 10 m straight, then turns along a circle (sign +1 left, -1 right)."""
    straight = [(x, 0.0) for x in np.arange(0.0, 10.0, 1.0)]
    phi = np.arange(0.0, length / radius, 1.0 / radius)
    turn = [(10.0 + radius * math.sin(a), sign * radius * (1.0 - math.cos(a))) for a in phi]
    return np.array(straight + turn)


def test_a_left_and_a_right_turn_ahead() -> None:
    assert route_command(_arc(+1.0)) is LEFT
    assert route_command(_arc(-1.0)) is RIGHT
    assert route_command([(x, 0.5) for x in range(0, 60, 2)]) is STRAIGHT


def test_the_first_point_past_the_lookahead_decides() -> None:
    route = [(0.0, 0.0), (10.0, 0.0), (19.0, 10.0), (30.0, 1.0)]
    assert route_command(route) is LEFT  # (19, 10) is 21.5 m away: the target, 10 m to the left
    assert route_command(route, RouteRule(lookahead_m=22.0)) is STRAIGHT  # now (30, 1) is
    assert route_command([(0.0, 0.0), (19.0, 10.0)], RouteRule(lookahead_m=22.0)) is STRAIGHT  # none that far


def test_thresholds_are_parameters() -> None:
    route = [(0.0, 0.0), (25.0, 2.5)]
    assert route_command(route) is STRAIGHT
    assert route_command(route, RouteRule(lateral_threshold_m=2.0)) is LEFT
    assert route_command([(0.0, 0.0), (25.0, -2.5)], RouteRule(lateral_threshold_m=2.0)) is RIGHT
    assert route_command([(0.0, 0.0), (4.0, 3.0)]) is STRAIGHT  # nothing 20 m ahead: the route ends sooner


@pytest.mark.parametrize(
    "route", [[], [(1.0, 2.0)], [(0.0, 0.0), (math.nan, 1.0)], [(0.0, 0.0), (math.inf, 0.0)], [[1.0], [2.0]], "ab"]
)
def test_bad_routes_are_refused(route) -> None:
    with pytest.raises(RouteError):
        route_command(route)
    with pytest.raises(RouteError):
        RouteRule(lookahead_m=-1.0)


def test_a_route_in_a_fixed_frame_seen_from_the_ego() -> None:
    pose = EgoPose("map", 100.0, 50.0, 0.0, math.pi / 2)  # facing +y
    world = np.array([(100.0, 50.0), (100.0, 80.0), (70.0, 80.0)])  # ahead 30 m, then 30 m to the west (left)
    ego = to_ego_frame(world, pose)
    np.testing.assert_allclose(ego, [(0.0, 0.0), (30.0, 0.0), (30.0, 30.0)], atol=1e-9)
    assert route_command(ego) is STRAIGHT  # (30, 0) is the first point 20 m away
    assert route_command(to_ego_frame(np.array([(100.0, 50.0), (90.0, 70.0)]), pose)) is LEFT


def test_the_hold_keeps_a_turn_until_straight_has_lasted() -> None:
    hold = CommandHold(hold_s=1.0)
    s = 1_000_000_000
    assert hold.update_command(LEFT, 0) is LEFT
    assert hold.update_command(STRAIGHT, s // 2) is LEFT
    assert hold.update_command(STRAIGHT, s) is LEFT
    assert hold.update_command(STRAIGHT, s // 2 + s) is STRAIGHT
    assert hold.update_command(RIGHT, 2 * s) is RIGHT
    hold.reset()
    assert hold.command is None
