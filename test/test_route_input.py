"""The route input's rules without DDS (``ros/route_input.py``): real ``nav_msgs/Path`` messages into
:class:`RouteSource`; the node over DDS is ``test_node_route.py``."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("nav_msgs.msg", reason="ROS 2 messages are not importable")

from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path as PathMsg

from wam_diff2_ros.core.frames import EgoPose
from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.core.samples import InputError
from wam_diff2_ros.ros.conversions import ns_to_stamp
from wam_diff2_ros.ros.route_input import RouteSource

S = 1_000_000_000
# heading +y at (10, 5): 20 m ahead then 10 m to the left (-x)
LEFT = [(10.0, 5.0), (10.0, 15.0), (0.0, 25.0)]
EGO = EgoPose("map", 10.0, 5.0, 0.0, math.pi / 2)


def path(frame: str, points, stamp_ns: int = 0) -> PathMsg:
    msg = PathMsg()
    msg.header.frame_id = frame
    msg.header.stamp = ns_to_stamp(stamp_ns)
    for x, y in points:
        pose = PoseStamped()
        pose.pose.position.x, pose.pose.position.y = x, y
        msg.poses.append(pose)
    return msg


def test_a_map_route_before_odometry_waits_for_the_first_pose_and_follows_later_ones():
    source = RouteSource(20.0, 3.0, 1.0)
    assert source.on_path(path("map", LEFT), 1 * S) is None  # kept, no pose yet
    sample = source.on_pose(EGO, 2 * S, 2 * S)
    assert sample is not None and sample.command is NavigationCommand.LEFT and sample.stamp_ns == 2 * S
    # the ego has driven past the turn: 40 m further along +y, the route's far end is behind -> straight, held 1 s
    past = EgoPose("map", 10.0, 45.0, 0.0, math.pi / 2)
    assert source.on_pose(past, 3 * S, 3 * S).command is NavigationCommand.LEFT
    assert source.on_pose(past, 4 * S, 4 * S).command is NavigationCommand.STRAIGHT
    assert source.on_pose(EGO, 3 * S, 4 * S) is None  # an older odometry stamp changes nothing


def test_a_route_in_another_frame_is_refused_and_a_kept_one_is_dropped_when_the_odometry_differs():
    source = RouteSource(20.0, 3.0, 1.0)
    source.on_pose(EGO, 1 * S, 1 * S)
    with pytest.raises(InputError, match="must be in 'base_link' or the frame 'map'"):
        source.on_path(path("odom", LEFT), 2 * S)
    assert source.on_path(path("map", LEFT, 2 * S), 2 * S).command is NavigationCommand.LEFT
    with pytest.raises(InputError, match="dropped: the odometry is in 'odom'"):
        source.on_pose(EgoPose("odom", 0.0, 0.0, 0.0, 0.0), 3 * S, 3 * S)
    assert source.on_pose(EgoPose("odom", 0.0, 0.0, 0.0, 0.0), 4 * S, 4 * S) is None  # nothing kept


def test_a_base_link_route_is_read_as_given_and_bad_ones_change_nothing():
    source = RouteSource(20.0, 3.0, 1.0)
    right = source.on_path(path("base_link", [(0.0, 0.0), (25.0, -8.0)], 5 * S), 6 * S)
    assert right.command is NavigationCommand.RIGHT and right.stamp_ns == 5 * S
    for bad, reason in (([(1.0, 1.0)], "at least 2 points"), ([(0.0, 0.0), (math.inf, 1.0)], "not finite")):
        with pytest.raises(InputError, match=reason):
            source.on_path(path("base_link", bad, 7 * S), 7 * S)
    assert source.hold.command is NavigationCommand.RIGHT


def test_the_replay_takes_a_path_topic_as_the_route_only_when_it_is_named_for_one():
    from wam_diff2_ros.bag import TopicInfo
    from wam_diff2_ros.replay.settings import TopicRequest
    from wam_diff2_ros.replay.topics import select_topics

    def bag(*names: str) -> dict:
        infos = [TopicInfo("/cam/image_raw", "sensor_msgs/msg/Image", 1)]
        infos += [TopicInfo(name, "nav_msgs/msg/Path", 1) for name in names]
        return {t.name: t for t in infos}

    # nav_msgs/Path is common (planners' paths): one not named for a route is never taken, two do not conflict
    assert select_topics(bag("/planning/path", "/other/path"), TopicRequest(), 1).route is None
    chosen = select_topics(bag("/planning/path", "/mission/route_centerline"), TopicRequest(), 1)
    assert chosen.route == "/mission/route_centerline"
    assert select_topics(bag("/planning/path"), TopicRequest({"route": "/planning/path"}), 1).route == "/planning/path"
