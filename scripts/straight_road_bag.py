"""A plain straight road drawn with OpenCV (not the package's simulator) into a rosbag2 bag: a drive the demo model
never saw, for docs/candidates.md.

The ego drives straight along x at a constant speed; a pinhole camera 1.5 m above the road looks forward. Each
frame: sky, grass, grey asphalt between two solid white edge lines 3.5 m either side, dashed centre markings that
move with the ego, drawn by projecting road points (no texture from sim/). Odometry at 50 Hz, the command
"straight" at 1 Hz, a JPEG front image and its CameraInfo at 10 Hz, on the sample drive's topics.

    python scripts/straight_road_bag.py OUT --seconds 25 --speed 8
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
from geometry_msgs.msg import AccelWithCovarianceStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, CompressedImage
from std_msgs.msg import String

from wam_diff2_ros.bag import BagWriter, ns_to_stamp
from wam_diff2_ros.sim.sample_bag import SAMPLE_TOPICS, SAMPLE_TYPES

START_NS = 1_700_000_000_000_000_000
WIDTH, HEIGHT, FOCAL, CAMERA_HEIGHT_M = 960, 540, 600.0, 1.5
LANE_HALF_WIDTH_M, DASH_M, GAP_M = 3.5, 3.0, 6.0


def project(x: float, y: float) -> tuple[int, int] | None:
    """Road point (x forward, y left, on the ground, ego frame) → pixel; None behind the camera."""
    if x <= 0.5:
        return None
    return round(WIDTH / 2 - FOCAL * y / x), round(HEIGHT / 2 + FOCAL * CAMERA_HEIGHT_M / x)


def draw_frame(travelled_m: float) -> np.ndarray:
    """The road seen after `travelled_m` metres."""
    image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    image[: HEIGHT // 2] = (200, 170, 120)  # sky (BGR)
    image[HEIGHT // 2 :] = (60, 120, 60)  # grass
    far, near = 200.0, 1.0
    corners = [project(near, 6.0), project(far, 6.0), project(far, -6.0), project(near, -6.0)]
    cv2.fillPoly(image, [np.array(corners, np.int32)], (90, 90, 90))
    for side in (-LANE_HALF_WIDTH_M, LANE_HALF_WIDTH_M):
        cv2.line(image, project(near, side), project(far, side), (240, 240, 240), 3, cv2.LINE_AA)
    start = -(travelled_m % (DASH_M + GAP_M))
    x = start
    while x < far:
        a, b = project(max(x, near), 0.0), project(max(x + DASH_M, near), 0.0)
        if x + DASH_M > near and a and b:
            cv2.line(image, a, b, (230, 230, 230), 2, cv2.LINE_AA)
        x += DASH_M + GAP_M
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--speed", type=float, default=8.0, help="constant speed, m/s")
    args = parser.parse_args()
    info = CameraInfo()
    info.header.frame_id = "camera_front_optical"
    info.width, info.height = WIDTH, HEIGHT
    info.distortion_model = "plumb_bob"
    info.d = [0.0] * 5
    info.k = [FOCAL, 0.0, WIDTH / 2, 0.0, FOCAL, HEIGHT / 2, 0.0, 0.0, 1.0]
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [FOCAL, 0.0, WIDTH / 2, 0.0, 0.0, FOCAL, HEIGHT / 2, 0.0, 0.0, 0.0, 1.0, 0.0]
    keys = ("image_compressed", "camera_info", "odometry", "command", "acceleration")
    with BagWriter(args.out, overwrite=True, compress=True) as bag:
        for key in keys:
            bag.add_topic(SAMPLE_TOPICS[key], SAMPLE_TYPES[key])
        for tick in range(int(args.seconds * 50) + 1):  # 50 Hz clock: odometry every tick
            stamp = START_NS + tick * 20_000_000
            travelled = args.speed * tick * 0.02
            odometry = Odometry()
            odometry.header.stamp = ns_to_stamp(stamp)
            odometry.header.frame_id, odometry.child_frame_id = "odom", "base_link"
            odometry.pose.pose.position.x = travelled
            odometry.pose.pose.orientation.w = 1.0
            odometry.twist.twist.linear.x = args.speed
            bag.write(SAMPLE_TOPICS["odometry"], odometry, stamp)
            acceleration = AccelWithCovarianceStamped()
            acceleration.header.stamp = ns_to_stamp(stamp)
            acceleration.header.frame_id = "base_link"
            bag.write(SAMPLE_TOPICS["acceleration"], acceleration, stamp)
            if tick % 50 == 0:
                bag.write(SAMPLE_TOPICS["command"], String(data="straight"), stamp)
            if tick % 5 == 0:
                ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(draw_frame(travelled), cv2.COLOR_RGB2BGR))
                assert ok
                image = CompressedImage(format="jpeg", data=jpeg.tobytes())
                image.header.stamp = ns_to_stamp(stamp)
                image.header.frame_id = info.header.frame_id
                bag.write(SAMPLE_TOPICS["image_compressed"], image, stamp)
                info.header.stamp = image.header.stamp
                bag.write(SAMPLE_TOPICS["camera_info"], info, stamp)
    print(f"wrote {args.out} ({args.seconds:g} s at {args.speed:g} m/s)")


if __name__ == "__main__":
    main()
