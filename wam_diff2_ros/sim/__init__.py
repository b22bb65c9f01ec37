"""A deterministic synthetic drive written as a rosbag2 MCAP bag (``wam-diff2-make-sample-bag``).

Modules: :mod:`~wam_diff2_ros.sim.road` (frames, rates, road geometry), :mod:`~wam_diff2_ros.sim.scenario` (ego
and actors, ground truth), :mod:`~wam_diff2_ros.sim.render` (camera frames), :mod:`~wam_diff2_ros.sim.sample_bag`
(the bag).

The ego vehicle drives in the right lane of a two-lane road with lane markings: straight at
cruise speed (~8 m/s), braking to ~4.5 m/s for a 90° left turn (lane radius 18–26 m, from the
seed), re-accelerating onto a straight, then a gentle right curve (radius 90 m) at cruise speed
and a long straight. Curvature changes over 8 m (clothoid-like), speed changes follow raised-
cosine profiles, so velocity, yaw rate and acceleration are continuous. Other vehicles are
cuboids: a lead car in the ego lane (2.2 s time gap), oncoming cars, parked cars on both
shoulders; poles, trees and buildings line the road. Everything follows from ``--seed``.

Topics (:data:`SAMPLE_TOPICS`, types in :data:`SAMPLE_TYPES`), all offered reliable / volatile /
keep-last 10, so both reliable and best-effort subscribers receive them when the bag is played:

- ``/camera/front/image_raw/compressed``: ``sensor_msgs/msg/CompressedImage``, JPEG, 10 Hz
  (with ``--raw`` instead ``/camera/front/image_raw``: ``sensor_msgs/msg/Image``, rgb8)
- ``/camera/front/camera_info``: ``sensor_msgs/msg/CameraInfo`` (pinhole, no distortion), 10 Hz
- ``/odom``: ``nav_msgs/msg/Odometry``, 50 Hz
- ``/imu/acceleration``: ``geometry_msgs/msg/AccelWithCovarianceStamped``, 50 Hz
- ``/navigation/command``: ``std_msgs/msg/String`` (``straight`` / ``left``), 2 Hz

Frames (REP 103/105): odometry ``odom`` -> ``base_link`` (the rear axle; the drive starts at the
``odom`` origin heading along +x), twist and acceleration in ``base_link`` (x forward, y left);
images in ``camera_front_optical`` (z forward, x right, y down), mounted 1.6 m ahead of the rear
axle, 1.45 m up, pitched 2° down, no distortion. The command follows NAVSIM semantics: ``left``
from 3 s before the ego enters the left turn until it leaves it, ``straight`` otherwise (the
gentle right curve is lane following, not a turn). Header stamps are simulated time from
1700000000 s; each message's bag receive time equals its header stamp (the command, a
``std_msgs/String``, has no header: its receive time is its stamp). Ground truth without
decoding anything: :func:`simulate_drive`.
"""

from wam_diff2_ros.sim.render import CameraModel, render_frames
from wam_diff2_ros.sim.road import (
    BASE_FRAME,
    CAMERA_FRAME,
    CAMERA_PITCH_RAD,
    CAMERA_RATE_HZ,
    CAMERA_X_M,
    CAMERA_Z_M,
    DEFAULT_START_NS,
    ODOM_FRAME,
)
from wam_diff2_ros.sim.sample_bag import SAMPLE_TOPICS, SAMPLE_TYPES, SampleBag, make_sample_bag
from wam_diff2_ros.sim.scenario import DriveTrack, simulate_drive

__all__ = [
    "BASE_FRAME",
    "CAMERA_FRAME",
    "CAMERA_PITCH_RAD",
    "CAMERA_RATE_HZ",
    "CAMERA_X_M",
    "CAMERA_Z_M",
    "DEFAULT_START_NS",
    "ODOM_FRAME",
    "SAMPLE_TOPICS",
    "SAMPLE_TYPES",
    "CameraModel",
    "DriveTrack",
    "SampleBag",
    "make_sample_bag",
    "render_frames",
    "simulate_drive",
]
