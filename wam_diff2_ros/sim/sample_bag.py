"""The sample drive written as a rosbag2 MCAP bag (:func:`make_sample_bag`); topics in :data:`SAMPLE_TOPICS`."""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from wam_diff2_ros.sim.render import Renderer
from wam_diff2_ros.sim.road import (
    BASE_FRAME,
    CAMERA_FRAME,
    CAMERA_PHASE_S,
    CAMERA_RATE_HZ,
    COMMAND_RATE_HZ,
    DEFAULT_START_NS,
    ODOM_FRAME,
    ODOM_RATE_HZ,
)
from wam_diff2_ros.sim.scenario import DriveTrack, Scenario, drive_track, tick_offsets_ns

SAMPLE_TOPICS: dict[str, str] = {
    "image_compressed": "/camera/front/image_raw/compressed",
    "image_raw": "/camera/front/image_raw",
    "camera_info": "/camera/front/camera_info",
    "odometry": "/odom",
    "command": "/navigation/command",
    "acceleration": "/imu/acceleration",
}
SAMPLE_TYPES: dict[str, str] = {
    "image_compressed": "sensor_msgs/msg/CompressedImage",
    "image_raw": "sensor_msgs/msg/Image",
    "camera_info": "sensor_msgs/msg/CameraInfo",
    "odometry": "nav_msgs/msg/Odometry",
    "command": "std_msgs/msg/String",
    "acceleration": "geometry_msgs/msg/AccelWithCovarianceStamped",
}


@dataclass(frozen=True)
class SampleBag:
    """What :func:`make_sample_bag` wrote."""

    path: Path
    size_bytes: int
    counts: dict[str, int]
    seconds: float
    elapsed_s: float
    track: DriveTrack


def make_sample_bag(
    out_dir: str | Path,
    *,
    seconds: float = 25.0,
    seed: int = 0,
    width: int = 960,
    height: int = 540,
    raw: bool = False,
    camera_rate_hz: float = CAMERA_RATE_HZ,
    jpeg_quality: int = 75,
    overwrite: bool = False,
    start_ns: int = DEFAULT_START_NS,
    progress: Callable[[int, int], None] | None = None,
    without: Sequence[str] = (),
) -> SampleBag:
    """Render the drive and write it as a rosbag2 MCAP folder at ``out_dir``; ``without`` names
    :data:`SAMPLE_TOPICS` keys to leave out (e.g. ``("odometry",)`` for a bag with no ground truth)."""
    from geometry_msgs.msg import AccelWithCovarianceStamped
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image
    from std_msgs.msg import String

    from wam_diff2_ros.bag import BagWriter, ns_to_stamp

    if width < 64 or height < 48 or width > 4096 or height > 4096:
        raise ValueError(f"image size {width}x{height} is outside 64x48 .. 4096x4096")
    if not 1 <= jpeg_quality <= 100:
        raise ValueError(f"jpeg_quality must be 1..100, not {jpeg_quality}")
    omitted = {SAMPLE_TOPICS[key] for key in without if key in SAMPLE_TOPICS}
    if len(omitted) != len(set(without)):
        raise ValueError(f"without: {sorted(set(without) - set(SAMPLE_TOPICS))} are not in {sorted(SAMPLE_TOPICS)}")
    t_start = time.perf_counter()
    sc = Scenario(seconds, seed)
    track = drive_track(sc, ODOM_RATE_HZ, COMMAND_RATE_HZ, start_ns)
    renderer = Renderer(sc, width, height)
    cam = renderer.cam
    image_key = "image_raw" if raw else "image_compressed"
    camera_offsets = tick_offsets_ns(sc.seconds, camera_rate_hz, CAMERA_PHASE_S)

    events: list[tuple[int, int, str, int]] = []  # stamp, tie-break order, kind, index
    events += [(int(s), 0, "odometry", i) for i, s in enumerate(track.stamps_ns)]
    events += [(int(s), 1, "acceleration", i) for i, s in enumerate(track.stamps_ns)]
    events += [(int(track.command_stamps_ns[i]), 2, "command", i) for i in range(len(track.commands))]
    events += [(start_ns + int(o), 3, "camera", i) for i, o in enumerate(camera_offsets)]
    events.sort()

    custom = {
        "generator": "wam_diff2_ros.sim",
        "seed": str(seed),
        "seconds": f"{sc.seconds:g}",
        "image_size": f"{width}x{height}",
        "left_turn_radius_m": f"{sc.turn_radius:.3f}",
    }
    with BagWriter(out_dir, overwrite=overwrite, custom_data=custom, compress=True) as bag:
        for key in (image_key, "camera_info", "odometry", "acceleration", "command"):
            if SAMPLE_TOPICS[key] not in omitted:
                bag.add_topic(SAMPLE_TOPICS[key], SAMPLE_TYPES[key])

        def write(key: str, msg: object, stamp_ns: int) -> None:
            if SAMPLE_TOPICS[key] not in omitted:
                bag.write(SAMPLE_TOPICS[key], msg, stamp_ns)

        info = CameraInfo()
        info.header.frame_id = CAMERA_FRAME
        info.width, info.height = cam.width, cam.height
        info.distortion_model = "plumb_bob"
        info.d = [0.0] * 5
        info.k = cam.k
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = cam.p
        pose_cov = np.diag([0.02**2, 0.02**2, 1e-4, 1e-4, 1e-4, 0.002**2]).ravel().tolist()
        twist_cov = np.diag([0.05**2, 0.02**2, 1e-4, 1e-4, 1e-4, 0.005**2]).ravel().tolist()
        accel_cov = np.diag([0.05**2, 0.05**2, 0.05**2, 1e-3, 1e-3, 1e-3]).ravel().tolist()
        done = 0
        for stamp, _, kind, i in events:
            if kind == "odometry":
                msg = Odometry()
                msg.header.stamp = ns_to_stamp(stamp)
                msg.header.frame_id = ODOM_FRAME
                msg.child_frame_id = BASE_FRAME
                msg.pose.pose.position.x = float(track.x[i])
                msg.pose.pose.position.y = float(track.y[i])
                msg.pose.pose.orientation.z = math.sin(float(track.yaw[i]) / 2)
                msg.pose.pose.orientation.w = math.cos(float(track.yaw[i]) / 2)
                msg.pose.covariance = pose_cov
                msg.twist.twist.linear.x = float(track.speed[i])
                msg.twist.twist.angular.z = float(track.yaw_rate[i])
                msg.twist.covariance = twist_cov
                write("odometry", msg, stamp)
            elif kind == "acceleration":
                msg = AccelWithCovarianceStamped()
                msg.header.stamp = ns_to_stamp(stamp)
                msg.header.frame_id = BASE_FRAME
                msg.accel.accel.linear.x = float(track.accel_x[i])
                msg.accel.accel.linear.y = float(track.accel_y[i])
                msg.accel.accel.angular.z = float(track.yaw_accel[i])
                msg.accel.covariance = accel_cov
                write("acceleration", msg, stamp)
            elif kind == "command":
                write("command", String(data=track.commands[i]), stamp)
            else:
                pixels = renderer.render((stamp - start_ns) / 1e9)
                if raw:
                    img = Image()
                    img.header.stamp = ns_to_stamp(stamp)
                    img.header.frame_id = CAMERA_FRAME
                    img.height, img.width = cam.height, cam.width
                    img.encoding = "rgb8"
                    img.is_bigendian = 0
                    img.step = cam.width * 3
                    img.data = pixels.tobytes()
                else:
                    buffer = io.BytesIO()
                    PILImage.fromarray(pixels, "RGB").save(buffer, "JPEG", quality=jpeg_quality, optimize=True)
                    img = CompressedImage()
                    img.header.stamp = ns_to_stamp(stamp)
                    img.header.frame_id = CAMERA_FRAME
                    img.format = "jpeg"
                    img.data = buffer.getvalue()
                write(image_key, img, stamp)
                info.header.stamp = ns_to_stamp(stamp)
                write("camera_info", info, stamp)
                done += 1
                if progress is not None:
                    progress(done, len(camera_offsets))
        counts = dict(bag.counts)
    size = sum(p.stat().st_size for p in Path(out_dir).rglob("*") if p.is_file())
    return SampleBag(Path(out_dir), size, counts, sc.seconds, time.perf_counter() - t_start, track)
