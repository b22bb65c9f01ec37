"""What an episode writes while it runs: the MCAP bag (every input topic, the node's outputs, the ground truth)
and the bird's-eye video (:class:`Recorder`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.drive.score import box_corners
from wam_diff2_ros.drive.vehicle import VehicleState, footprint
from wam_diff2_ros.sim.road import ASPHALT_D, CENTRE_D, LEFT_EDGE_D, RIGHT_EDGE_D

GROUND_TRUTH_TOPIC = "/sim/ground_truth"
SCENARIO_TOPIC = "/sim/scenario"
INPUT_TYPES = {
    "/camera/front/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
    "/camera/front/camera_info": "sensor_msgs/msg/CameraInfo",
    "/odom": "nav_msgs/msg/Odometry",
    "/imu/acceleration": "geometry_msgs/msg/AccelWithCovarianceStamped",
    "/navigation/command": "std_msgs/msg/String",
    GROUND_TRUTH_TOPIC: "std_msgs/msg/String",
    SCENARIO_TOPIC: "std_msgs/msg/String",
}
VIDEO_SIZE = 480
VIDEO_M_PER_PX = 0.15
VIDEO_FPS = 10


class Recorder:
    """Writes the bag and the video as the episode goes; :meth:`close` finishes both (idempotent)."""

    def __init__(self, out: Path, world: Any, bag: bool, video: bool, scenario_json: str, start_ns: int) -> None:
        from wam_diff2_ros.bag import BagWriter

        self.world = world
        self.bag = None
        if bag:
            self.bag = BagWriter(
                out / "episode", compress=True, overwrite=True, custom_data={"generator": "wam-diff2-drive"}
            )
            for topic, msgtype in INPUT_TYPES.items():
                self.bag.add_topic(topic, msgtype)
            from std_msgs.msg import String

            self.bag.write(SCENARIO_TOPIC, String(data=scenario_json), start_ns)
        self.video = None
        self.video_path = out / "bev.mp4"
        if video:
            import cv2

            self.video = cv2.VideoWriter(
                str(self.video_path), cv2.VideoWriter_fourcc(*"mp4v"), VIDEO_FPS, (VIDEO_SIZE, VIDEO_SIZE)
            )
            if not self.video.isOpened():
                raise RuntimeError(f"OpenCV cannot write {self.video_path} (mp4v)")
        self.trail: list[tuple[float, float]] = []
        self._road = self._road_polylines()

    def write(self, topic: str, msg: Any, stamp_ns: int) -> None:
        if self.bag is not None and topic:
            self.bag.write(topic, msg, stamp_ns)

    def output(self, name: str, msg: Any, stamp_ns: int) -> None:
        """One of the node's outputs (``PlanCycle.outputs()``), under the replay's topic names."""
        from wam_diff2_ros.replay.topics import OUTPUT_TOPICS

        if self.bag is None or name not in OUTPUT_TOPICS:
            return
        self.bag.add_topic(OUTPUT_TOPICS[name], type(msg))
        self.bag.write(OUTPUT_TOPICS[name], msg, stamp_ns)

    def ground_truth(
        self, stamp_ns: int, t: float, state: VehicleState, yaw_rate: float, geo: dict, episode: Any
    ) -> None:
        """The 10 Hz ground truth: the ego's state and body, route position, and the objects nearby (their boxes)."""
        obstacles = []
        for i, ob in enumerate(self.world.obstacles):
            x, y, yaw = ob.actor.pose(t)
            if math.hypot(x - state.x, y - state.y) < 80.0:
                obstacles.append(
                    {
                        "id": i,
                        "x": round(x, 4),
                        "y": round(y, 4),
                        "yaw": round(yaw, 5),
                        "half_length": round(ob.half_length, 4),
                        "half_width": round(ob.half_width, 4),
                        "agent": ob.agent,
                    }
                )
        plan = episode.tracker.plan
        row = {
            "t": round(t, 3),
            "ego": {
                "x": state.x,
                "y": state.y,
                "yaw": state.yaw,
                "v": state.v,
                "a": state.a,
                "delta": state.delta,
                "yaw_rate": yaw_rate,
                "lat_accel": state.v * yaw_rate,
            },
            "route": {"s": geo["s"], "d": geo["d"], "on_road": geo["on_road"], "multi_lane": geo["multi_lane"]},
            "corners": np.round(geo["corners"], 4).tolist(),
            "contacts": geo["contacts"],
            "plan": None if plan is None else {"source": plan.source, "index": plan.index, "end_s": plan.end_s},
            "obstacles": obstacles,
        }
        if self.bag is not None:
            from std_msgs.msg import String

            self.bag.write(GROUND_TRUTH_TOPIC, String(data=json.dumps(row)), stamp_ns)
        if self.video is not None:
            self.trail.append((state.x, state.y))
            self.video.write(self._frame(t, state, plan))

    # ---- the bird's-eye frame
    def _road_polylines(self) -> dict[str, np.ndarray]:
        road = self.world.road
        s = np.arange(-30.0, road.length, 1.0)
        lines = {}
        for name, d in (
            ("left", ASPHALT_D[1]),
            ("right", ASPHALT_D[0]),
            ("edge_r", RIGHT_EDGE_D),
            ("centre", CENTRE_D),
            ("edge_l", LEFT_EDGE_D),
        ):
            x, y, _ = road.frenet_to_world(s, d)
            lines[name] = np.stack([x, y], axis=1)
        return lines

    def _frame(self, t: float, state: VehicleState, plan: Any) -> np.ndarray:
        import cv2

        img = np.full((VIDEO_SIZE, VIDEO_SIZE, 3), (60, 110, 60), np.uint8)

        def px(points: np.ndarray) -> np.ndarray:
            p = (np.asarray(points) - [state.x, state.y]) / VIDEO_M_PER_PX
            return np.stack([VIDEO_SIZE / 2 + p[:, 0], VIDEO_SIZE / 2 - p[:, 1]], axis=1).astype(np.int32)

        near = np.hypot(self._road["left"][:, 0] - state.x, self._road["left"][:, 1] - state.y) < 60.0
        if near.any():
            poly = np.concatenate([self._road["left"][near], self._road["right"][near][::-1]])
            cv2.fillPoly(img, [px(poly)], (80, 80, 84))
            for name in ("edge_r", "centre", "edge_l"):
                cv2.polylines(img, [px(self._road[name][near])], False, (230, 230, 230), 1)
        for ob in self.world.obstacles:
            x, y, yaw = ob.actor.pose(t)
            if math.hypot(x - state.x, y - state.y) < 50.0:
                colour = (40, 40, 220) if ob.agent else (40, 160, 200)
                cv2.fillPoly(img, [px(box_corners(x, y, yaw, ob.half_length, ob.half_width))], colour)
        if len(self.trail) > 1:
            cv2.polylines(img, [px(np.array(self.trail[-300:]))], False, (255, 200, 0), 2)
        if plan is not None:
            colour = (0, 220, 255) if plan.source == "model" else (200, 200, 200)
            cv2.polylines(img, [px(np.stack([plan.x, plan.y], axis=1))], False, colour, 2)
        cv2.fillPoly(img, [px(footprint(state, _limits()))], (255, 255, 255))
        cv2.putText(
            img, f"t {t:5.1f} s  v {state.v:4.1f} m/s", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1
        )
        return img

    def close(self) -> None:
        if self.bag is not None:
            self.bag.close()
        if self.video is not None:
            self.video.release()
            self.video = None


def _limits() -> Any:
    from wam_diff2_ros.drive.vehicle import VehicleLimits

    return VehicleLimits()
