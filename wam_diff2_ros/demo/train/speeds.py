"""Planning samples on the roads of simulated drives at any speed and pose: the frame the camera sees at a point
of a drive's road (:mod:`wam_diff2_ros.sim`), asked at a drawn speed (0-16 m/s, an eighth of them standing or
creeping), a drawn constant acceleration and the lateral acceleration the road's curvature gives at that speed,
with the command a drive at that speed has there (``left`` from 3 s before the left turn until its end). The
answer is the future along the lane centre at that speed, 0.5 .. 4 s ahead. A share of the instants start off the
lane centre and off its heading (up to 1.2 m and 6°; the frame is rendered from that pose) and the answer steers
back onto the centre line. Speeds are capped where the road's curvature ahead would ask for more lateral
acceleration than a drawn budget of 3-5 m/s². Each frame also serves mirrored (image flipped, ``left`` ↔
``right``, y negated).

These cover what the drives themselves do not: every speed from standing to above 10 m/s on straights and in
turns, so the waypoints' x crosses every decade (10, 20, ... 60 m), and poses a closed loop reaches.

Two options for closing the loop (off by default, so the validation and test sets stay as they are):
``blind_lateral`` asks that share of the instants with the lateral acceleration of a car going straight (about 0)
whatever the road does, so that the turn has to be read from the image (a closed loop enters a turn with no
lateral acceleration yet, and a model that turns only on the prompt's drives straight on); ``clear_path`` keeps
only instants whose answer never comes close to a car of the drive's traffic (at a drawn speed the answer would
otherwise drive through the lead car).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.prompts import format_number
from wam_diff2_ros.demo.train.config import DRIVE_SECONDS, IMAGE_SIZES, NUM_WAYPOINTS, WAYPOINT_DT
from wam_diff2_ros.demo.train.data import DrivingSample, ImagePool, travelled_distance
from wam_diff2_ros.demo.train.drives import MIRRORED_COMMAND
from wam_diff2_ros.sim.render import Renderer
from wam_diff2_ros.sim.road import COMMAND_LEAD_S
from wam_diff2_ros.sim.scenario import Scenario

MAX_PROMPT_SPEED = 16.0
STANDING_SHARE = 0.125  # instants at 0-0.5 m/s
RECOVERY_SHARE = 0.3  # instants off the lane centre and heading
MAX_OFFSET_M, MAX_HEADING_RAD = 1.2, math.radians(6.0)
TURN_SHARE = 0.5  # instants drawn around the left turn, the rest anywhere along the drive's road
# An answer's waypoint (rear axle) this close to a car's centre, in the lane's frame, would hit it.
CLEAR_AHEAD_M, CLEAR_BEHIND_M, CLEAR_SIDE_M = 9.0, 3.0, 2.2


class PoseRenderer(Renderer):
    """The sample drive's renderer with the ego placed at any pose (the actors still move with time)."""

    pose: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def render(self, t: float) -> np.ndarray:
        """The camera image at time ``t`` seen from :attr:`pose` (the rear axle's x, y, yaw) instead of the drive's."""
        x, y, yaw = self.pose
        return self.render_from(t, x, y, yaw, float(self.sc.s_at(t)))


def lateral_return(u: np.ndarray, offset: float, heading: float, length: float) -> np.ndarray:
    """Lateral offset from the lane centre after `u` metres along it: a cubic from (`offset`, slope
    tan(`heading`)) at 0 to (0, 0) at `length`, then 0."""
    tau = np.clip(np.asarray(u, float) / length, 0.0, 1.0)
    return offset * (2 * tau**3 - 3 * tau**2 + 1) + length * math.tan(heading) * (tau**3 - 2 * tau**2 + tau)


def _offset_pose(sc: Scenario, s: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y, yaw = sc.ego_pose_at_s(np.asarray(s, float))
    return x - np.sin(yaw) * d, y + np.cos(yaw) * d, yaw


def draw_instant(sc: Scenario, rng: np.random.Generator) -> dict | None:
    """One instant on `sc`'s road: ego pose, speed, accelerations, command and the future in the ego frame."""
    a0, a1 = sc.road.left_arc
    s_end = float(sc.s_at(DRIVE_SECONDS))
    s0 = float(rng.uniform(a0 - 45.0, a1 + 15.0) if rng.random() < TURN_SHARE else rng.uniform(2.0, s_end))
    if rng.random() < STANDING_SHARE:
        v0 = float(rng.uniform(0.0, 0.5)) * float(rng.random() < 0.6)
        accel = float(rng.uniform(0.0, 1.5)) if rng.random() < 0.5 else 0.0
    else:
        v0, accel = float(rng.uniform(0.0, MAX_PROMPT_SPEED)), float(rng.uniform(-2.5, 1.5))
    budget = float(rng.uniform(3.0, 5.0))
    times = WAYPOINT_DT * np.arange(1, NUM_WAYPOINTS + 1)
    for _ in range(30):  # slower until the road's curvature ahead fits the lateral-acceleration budget
        distances = travelled_distance(v0, accel, times)
        fine = np.linspace(0.0, float(distances[-1]), 40)
        speeds = np.sqrt(np.maximum(v0 * v0 + 2 * accel * fine, 0.0))
        if float(np.max(speeds**2 * np.abs(sc.curvature(s0 + fine)[0]))) <= budget:
            break
        v0 *= 0.85
    else:
        return None
    offset, heading = 0.0, 0.0
    if rng.random() < RECOVERY_SHARE:
        offset = float(rng.uniform(-MAX_OFFSET_M, MAX_OFFSET_M))
        heading = float(rng.uniform(-MAX_HEADING_RAD, MAX_HEADING_RAD))
    length = max(10.0, 2.0 * v0 + 5.0)
    ex, ey, eyaw = (float(v[0]) for v in _offset_pose(sc, np.array([s0]), np.array([offset])))
    eyaw += heading
    fx, fy, lane_yaw = _offset_pose(sc, s0 + distances, lateral_return(distances, offset, heading, length))
    cos, sin = math.cos(eyaw), math.sin(eyaw)
    dx, dy = fx - ex, fy - ey
    future = np.stack([cos * dx + sin * dy, -sin * dx + cos * dy], axis=1)
    kappa = float(sc.curvature(np.array([s0]))[0][0])
    lead_m = COMMAND_LEAD_S * max(v0, 1.0)
    return {
        "pose": (ex, ey, eyaw),
        "path_world": np.stack([fx, fy, lane_yaw], axis=1),  # the waypoints and the lane's heading there
        "time_s": sc.t_at_s(s0),
        "speed": v0,
        "acceleration": (accel, v0 * v0 * kappa + float(rng.normal(0.0, 0.1))),
        "command": "left" if a0 - lead_m <= s0 < a1 else "straight",
        "future": future,
    }


def path_is_clear(sc: Scenario, instant: dict) -> bool:
    """Whether no moving car of ``sc`` (the lead car, the oncoming ones) comes within the clearance of the answer's
    waypoints at their times: less than :data:`CLEAR_AHEAD_M` ahead of a waypoint or :data:`CLEAR_BEHIND_M`
    behind it, and less than :data:`CLEAR_SIDE_M` beside it, in the lane's frame there."""
    times = instant["time_s"] + WAYPOINT_DT * np.arange(1, NUM_WAYPOINTS + 1)
    for actor in sc.actors:
        if actor.static_xy is not None:  # parked cars and scenery stand beside the road
            continue
        for (wx, wy, yaw), t in zip(instant["path_world"], times, strict=True):
            ax, ay, _ = actor.pose(float(t))
            dx, dy = ax - wx, ay - wy
            ahead = math.cos(yaw) * dx + math.sin(yaw) * dy
            side = -math.sin(yaw) * dx + math.cos(yaw) * dy
            if -CLEAR_BEHIND_M < ahead < CLEAR_AHEAD_M and abs(side) < CLEAR_SIDE_M:
                return False
    return True


def speed_samples(
    drive_seeds: Sequence[int],
    frames_per_drive: int,
    seed: int,
    sizes: Sequence[tuple[int, int]] = IMAGE_SIZES,
    blind_lateral: float = 0.0,
    clear_path: bool = False,
) -> tuple[ImagePool, list[DrivingSample]]:
    """`frames_per_drive` instants on the road of each drive (and their mirror images), frame ``i`` of drive ``d``
    at size ``sizes[(d + i) % n]``; only instants whose answer passes the kinematic gate are kept (and, with
    ``clear_path``, only those whose answer keeps clear of the traffic). A share ``blind_lateral`` of the instants
    is asked with a lateral acceleration of about 0 (drawn from its own generator: the instants drawn stay the
    same)."""
    rng = np.random.default_rng(seed)
    blind_rng = np.random.default_rng([seed, 1])
    images: list[np.ndarray] = []
    samples: list[DrivingSample] = []
    by_command: dict[str, list[int]] = {name: [] for name in MIRRORED_COMMAND}
    for d, drive_seed in enumerate(drive_seeds):
        sc = Scenario(DRIVE_SECONDS, drive_seed)
        renderers: dict[tuple[int, int], PoseRenderer] = {}
        kept = 0
        while kept < frames_per_drive:
            instant = draw_instant(sc, rng)
            if instant is None:
                continue
            waypoints = tuple(
                (float(format_number(float(x))), float(format_number(float(y)))) for x, y in instant["future"]
            )
            answer = ",".join(format_number(v) for point in waypoints for v in point)
            if not parse_waypoints(answer, current_speed_mps=instant["speed"]).valid:
                continue
            if clear_path and not path_is_clear(sc, instant):
                continue
            if blind_lateral > 0.0 and blind_rng.random() < blind_lateral:
                instant["acceleration"] = (instant["acceleration"][0], float(blind_rng.normal(0.0, 0.1)))
            size = sizes[(d + kept) % len(sizes)]
            renderer = renderers.get(size) or renderers.setdefault(size, PoseRenderer(sc, *size))
            renderer.pose = instant["pose"]
            frame = renderer.render(instant["time_s"])
            kept += 1
            for mirrored in (False, True):
                sign = -1.0 if mirrored else 1.0
                name = MIRRORED_COMMAND[instant["command"]] if mirrored else instant["command"]
                by_command[name].append(len(images))
                images.append(np.ascontiguousarray(frame[:, ::-1]) if mirrored else frame)
                samples.append(
                    DrivingSample(
                        command=name,
                        velocity=(instant["speed"], 0.0),
                        acceleration=(instant["acceleration"][0], sign * instant["acceleration"][1]),
                        waypoints=tuple((x, sign * y if y else 0.0) for x, y in waypoints),
                        image_index=len(images) - 1,
                    )
                )
    return ImagePool(images, by_command), samples
