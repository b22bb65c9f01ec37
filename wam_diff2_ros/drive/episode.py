"""One closed-loop episode in-process, without a ROS executor (:func:`run_episode`).

Every 20 ms of simulated time (50 Hz) the ego's odometry and acceleration go to the node's
:class:`~wam_diff2_ros.ros.runtime.PlannerRuntime` through the node's input table (as the replay feeds bag
messages); every 100 ms the front camera, rendered from the ego's true pose by the simulator's renderer, and its
camera info; every 500 ms the route's command. The odometry, acceleration and command start
:data:`PRE_ROLL_TICKS` ticks before the first image (the car was already driving at its start speed), so the first
image finds them in either mode, whatever order DDS delivers them in. Planning instants follow the node's schedule
(``planning.rate_hz``, :class:`~wam_diff2_ros.ros.schedule.InstantSchedule`, its timer started one period before
t=0, so the first instant is the first image's); the model is busy for the plan's
latency (measured wall time, or ``latency_ms``) and an instant that falls while it is busy runs when it is free,
as the node's worker does. A plan made from the frame at t takes effect at t + latency; the gates (kinematic,
age on the runtime's clock = t + latency, confidence) are the runtime's own.
:class:`~wam_diff2_ros.drive.controller.Tracker` follows the plans; whenever no valid plan is in force — at the
start until the first one takes effect, and when the last one runs out — the car makes the tracker's comfortable
stop (:data:`~wam_diff2_ros.drive.controller.FALLBACK_DECEL`, never a blind drive ahead).

A planner that does not look at the camera (``looks_at_images = False``: the reference planners of
:mod:`wam_diff2_ros.drive.reference`) gets a black frame of the same size instead of a rendered one unless the
MCAP is written (the frame is never read; everything else is the same episode). A planner with ``attach`` gets
the episode's ground truth hook (:meth:`Episode.ground_truth`).

With ``latency_ms`` set, an episode is a pure function of the scenario, its seed and the model (deterministic);
with measured latency the timing of each plan depends on the machine.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wam_diff2_ros.drive import messages
from wam_diff2_ros.drive.controller import Tracker, plan_from_waypoints
from wam_diff2_ros.drive.score import EpisodeScorer, Trace
from wam_diff2_ros.drive.vehicle import Vehicle, VehicleLimits, VehicleState
from wam_diff2_ros.drive.world import ScenarioSpec, World, build_world
from wam_diff2_ros.replay.interrupts import INTERRUPTS
from wam_diff2_ros.sim.render import Renderer
from wam_diff2_ros.sim.road import DEFAULT_START_NS

TICK_NS = 20_000_000  # 50 Hz: vehicle, odometry, acceleration
CAMERA_EVERY = 5  # 10 Hz
COMMAND_EVERY = 25  # 2 Hz
TRACE_EVERY = 5  # 10 Hz: ground truth, score samples, video frames
STOPPED_END_S = 2.0  # standing still without a plan this long (after the first answer) ends the episode
CONTACT_END_S = 1.0  # an episode ends this long after a contact
OFF_ROAD_END_M = 8.0  # ... or when the ego is this far off the lane centre
MAX_CONSECUTIVE_ERRORS = 3
PRE_ROLL_TICKS = 10  # 0.2 s of odometry, acceleration and command before the first image


@dataclass
class EpisodeOptions:
    """How to run an episode (the command line's flags)."""

    out: Path
    latency_ms: float | None = None  # None: each plan's measured wall time
    width: int = 960
    height: int = 540
    overwrite: bool = False
    bag: bool = True
    video: bool = True
    report: bool = True
    start_ns: int = DEFAULT_START_NS
    dds: bool = False  # the planner node over DDS (drive/dds.py) instead of the runtime in this process
    dds_wait_s: float = 120.0  # DDS: how long to wait for the planner node (start, each plan)
    dds_resend_s: float = 5.0  # DDS: wall seconds without a trajectory before the awaited image goes out again
    driver: str = ""  # an egodriver policy's address (drive/egodriver.py) instead of the runtime in this process
    # what else identifies the run (the planner and its hash, the --set overrides): score.json's "settings", which a
    # resumed batch compares (drive/batch.py)
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GroundTruth:
    """The simulator's truth at the stamp of the image the runtime plans on (a privileged planner's input:
    :meth:`Episode.ground_truth`)."""

    t_s: float  # episode time of the image
    state: VehicleState  # the ego's rear-axle pose and speed then
    s: float  # its arc length along the route
    world: World
    limits: VehicleLimits


@dataclass
class PlanRecord:
    index: int
    t_s: float  # the planning instant
    stamp_s: float | None  # the image it planned on
    valid: bool
    reason: str
    latency_ms: float
    effective_s: float
    command: str = ""
    points: list[list[float]] = field(default_factory=list)  # world x, y of a valid plan (its start first)


@dataclass
class EpisodeResult:
    out: Path
    score: dict[str, Any]
    exit_code: int
    interrupted: bool = False


class Episode:
    """The loop's state (see the module docstring); :meth:`run` drives it to the end."""

    def __init__(
        self,
        spec: ScenarioSpec,
        config: Any,
        engine: Any,
        options: EpisodeOptions,
        log: Callable[[str], None] | None = None,
        world: World | None = None,
    ) -> None:
        from wam_diff2_ros.ros.input_rows import input_table
        from wam_diff2_ros.ros.runtime import PlannerRuntime
        from wam_diff2_ros.ros.schedule import InstantSchedule

        self.spec, self.config, self.options = spec, config, options
        self.log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.limits = VehicleLimits()
        self.world = world or build_world(spec, self.limits)
        self.renderer = Renderer(self.world, options.width, options.height)
        self._now_ns = options.start_ns
        self._plan_started: float | None = None
        self.runtime = PlannerRuntime(config, engine, clock=self._clock)
        self.rows = {row.role: row for row in input_table(config, self.runtime) if row.index in (None, 0)}
        # the node's timer has been running before t=0 (the pre-roll: the car was already driving), so its instants
        # fall at t = 0, 1/rate, ...: the first at the first image, as with planning.rate_hz 0 (and over DDS)
        period_ns = round(1e9 / config.rate_hz) if config.rate_hz > 0 else 0
        self.schedule = InstantSchedule(options.start_ns - period_ns, config.rate_hz)
        x, y, yaw = (float(v[0]) for v in self.world.road.frenet_to_world(0.0, spec.start_offset_m))
        speed = spec.start_speed_mps if spec.start_speed_mps is not None else float(self.world.route_speed([0.0])[0])
        yaw += math.radians(spec.start_heading_deg)
        self.vehicle = Vehicle(VehicleState(x, y, yaw, speed), self.limits)
        self.tracker = Tracker(self.limits)  # no plan in force yet: the comfortable stop until the first one
        self._last_image: tuple[int, VehicleState, float] | None = None
        self.render_images = getattr(engine, "looks_at_images", True) or options.bag
        attach = getattr(engine, "attach", None)
        if callable(attach):
            attach(self.ground_truth)
        self.scorer = EpisodeScorer(self.world, self.limits)
        self.trace = Trace()
        self.samples: list[dict[str, Any]] = []
        self.plans: list[PlanRecord] = []
        self.poses: list[tuple[float, float, float, float]] = []  # t, x, y, yaw at every tick
        self.commands: list[tuple[float, str]] = []
        self.problems: Counter[str] = Counter()
        self.busy_until_ns = 0
        self.pending = False
        self.errors = 0
        self.stop_reason = ""
        self.recorder: Any = None
        self.render_s = 0.0
        self.plan_wall_s = 0.0

    def _clock(self) -> int:
        """The runtime's clock: sim time, plus the plan's latency while a plan is being made."""
        if self._plan_started is None:
            return self._now_ns
        if self.options.latency_ms is not None:
            return self._now_ns + round(self.options.latency_ms * 1e6)
        return self._now_ns + round((time.perf_counter() - self._plan_started) * 1e9)

    def _t(self, stamp_ns: int) -> float:
        return (stamp_ns - self.options.start_ns) / 1e9

    def _feed(self, role: str, msg: Any, stamp_ns: int, topic: str) -> None:
        from wam_diff2_ros.ros.input_rows import receive

        row = self.rows.get(role)
        if row is not None:
            problem = receive(row, msg, stamp_ns)
            if problem is not None:
                self.problems[str(problem)] += 1
        if self.recorder is not None:
            self.recorder.write(topic, msg, stamp_ns)

    def run(self, recorder: Any = None) -> str:
        """Drive to the end; returns why it ended. KeyboardInterrupt propagates after the state is consistent."""
        self.recorder = recorder
        self._pre_roll()
        total_ticks = round(self.spec.duration_s * 1e9 / TICK_NS)
        stopped_since: float | None = None
        contact_at: float | None = None
        for k in range(total_ticks + 1):
            INTERRUPTS.check()
            now_ns = self.options.start_ns + k * TICK_NS
            self._now_ns = now_ns
            self._tick(now_ns)
            t = self._t(now_ns)
            state = self.vehicle.state
            yaw_rate = self.vehicle.yaw_rate()
            self.poses.append((t, state.x, state.y, state.yaw))
            near_s = self.samples[-1]["s"] if self.samples else 0.0
            self._feed_motion(now_ns, state, yaw_rate)
            if k % COMMAND_EVERY == 0:
                s, _ = self.world.frenet(state.x, state.y, near_s)
                text = self.world.command(float(s[0]), state.v)
                self.commands.append((t, text))
                self._feed("command", messages.command(text), now_ns, "/navigation/command")
            if k % CAMERA_EVERY == 0:
                self._camera(now_ns, state, near_s)
            if k % TRACE_EVERY == 0:
                geo = self.scorer.sample_geometry(t, state, near_s)
                self.trace.t.append(t)
                self.trace.states.append(state)
                self.trace.yaw_rate.append(yaw_rate)
                self.samples.append(geo)
                if self.recorder is not None:
                    self.recorder.ground_truth(now_ns, t, state, yaw_rate, geo, self)
                if geo["contacts"] and contact_at is None:
                    contact_at = t
                if abs(geo["d"]) > OFF_ROAD_END_M:
                    self.stop_reason = f"the ego left the road ({geo['d']:+.1f} m from the lane centre)"
                    break
            if contact_at is not None and t >= contact_at + CONTACT_END_S:
                self.stop_reason = f"contact with an object at t={contact_at:.1f} s"
                break
            for _t_ns, kind in self.schedule.due(now_ns + 1):
                self.pending = self.pending or kind == "plan"
            if self.pending and now_ns >= self.busy_until_ns:
                self._plan(now_ns)
                if self.stop_reason:
                    break
            steer, accel, following = self.tracker.command(t, state)
            if not following and state.v < 0.05 and self.plans:  # (before the first answer: waiting for it)
                stopped_since = t if stopped_since is None else stopped_since
                if t - stopped_since >= STOPPED_END_S:
                    self.stop_reason = "stopped: no valid plan in force (" + self._rejection_summary() + ")"
                    break
            else:
                stopped_since = None
            if k < total_ticks:
                self.vehicle.step(steer, accel, TICK_NS / 1e9)
        if not self.stop_reason:
            self.stop_reason = f"the scenario's {self.spec.duration_s:g} s are over"
        return self.stop_reason

    def _tick(self, now_ns: int) -> None:
        """Each step's start (the DDS mode publishes /clock here)."""

    def _feed_motion(self, stamp_ns: int, state: VehicleState, yaw_rate: float) -> None:
        """The ego's odometry and acceleration at ``stamp_ns``."""
        self._feed("odometry", messages.odometry(stamp_ns, state, yaw_rate), stamp_ns, "/odom")
        self._feed("acceleration", messages.acceleration(stamp_ns, state, yaw_rate), stamp_ns, "/imu/acceleration")

    def _pre_roll(self) -> None:
        """The odometry and acceleration of the start state driven back in time along its heading at its speed, and
        the route's command, for :data:`PRE_ROLL_TICKS` ticks before t=0 (nothing is rendered or scored)."""
        state = self.vehicle.state
        command = self.world.command(0.0, state.v)
        for k in range(-PRE_ROLL_TICKS, 0):
            stamp_ns = self.options.start_ns + k * TICK_NS
            self._now_ns = stamp_ns
            self._tick(stamp_ns)
            back_s = k * TICK_NS / 1e9
            past = VehicleState(
                state.x + math.cos(state.yaw) * state.v * back_s,
                state.y + math.sin(state.yaw) * state.v * back_s,
                state.yaw,
                state.v,
            )
            self._feed_motion(stamp_ns, past, 0.0)
            if k == -PRE_ROLL_TICKS:
                self._feed("command", messages.command(command), stamp_ns, "/navigation/command")
        self._settle()

    def _settle(self) -> None:
        """After the pre-roll (the DDS mode lets the planner node take the messages in)."""

    def _camera(self, now_ns: int, state: VehicleState, near_s: float) -> None:
        started = time.perf_counter()
        s, _ = self.world.frenet(state.x, state.y, near_s)
        self._last_image = (now_ns, state, float(s[0]))
        if self.render_images:
            rgb = self.renderer.render_from(self._t(now_ns), state.x, state.y, state.yaw, float(s[0]))
        else:
            rgb = np.zeros((self.options.height, self.options.width, 3), np.uint8)
        self.render_s += time.perf_counter() - started
        info = messages.camera_info(now_ns, self.renderer.cam)
        self._feed("camera_info", info, now_ns, "/camera/front/camera_info")
        self._feed("image", messages.image(now_ns, rgb), now_ns, "")
        if self.recorder is not None:
            self.recorder.write("/camera/front/image_raw/compressed", messages.jpeg(now_ns, rgb), now_ns)
        if "image" in self.rows:
            self.schedule.image(0, now_ns)

    def ground_truth(self) -> GroundTruth:
        """The simulator's truth at the latest camera frame's stamp (the privileged planners' input)."""
        if self._last_image is None:
            raise RuntimeError("no camera frame yet")
        stamp_ns, state, s = self._last_image
        return GroundTruth(self._t(stamp_ns), state, s, self.world, self.limits)

    def _plan(self, now_ns: int) -> None:
        self.pending = False
        self._plan_started = time.perf_counter()
        try:
            cycle = self.runtime.plan(now_ns)
        except Exception as exc:  # the engine failed: as in the node, reported, the car goes on
            self._plan_started = None
            self.errors += 1
            self.log(f"error: planning at t={self._t(now_ns):.2f} s failed: {type(exc).__name__}: {exc}")
            if self.errors >= MAX_CONSECUTIVE_ERRORS:
                self.stop_reason = f"the model failed {self.errors} times in a row ({type(exc).__name__}: {exc})"
            return
        wall_s = time.perf_counter() - self._plan_started
        self._plan_started = None
        self.errors = 0
        if cycle.idle:
            return
        self.plan_wall_s += wall_s
        latency_ns = (
            round(self.options.latency_ms * 1e6) if self.options.latency_ms is not None else round(wall_s * 1e9)
        )
        self.busy_until_ns = now_ns + latency_ns
        effective_s = self._t(now_ns + latency_ns)
        result = cycle.result
        if result is None:
            reason = "; ".join(str(p) for p in cycle.problems) or "no observation"
            self.plans.append(
                PlanRecord(len(self.plans), self._t(now_ns), None, False, reason, latency_ns / 1e6, effective_s)
            )
            return
        waypoints = [(w.t, w.x, w.y) for w in result.waypoints] if result.valid else []
        self._accept(
            now_ns,
            latency_ns,
            result.stamp_ns,
            bool(result.valid),
            result.reason,
            result.observation.command.value,
            waypoints,
        )
        if self.recorder is not None:
            for name, msg in cycle.outputs():
                self.recorder.output(name, msg, now_ns + latency_ns)

    def _accept(
        self,
        now_ns: int,
        latency_ns: int,
        stamp_ns: int,
        valid: bool,
        reason: str,
        command: str,
        waypoints: list[tuple[float, float, float]],
    ) -> None:
        """Record a plan made at ``now_ns`` from the image at ``stamp_ns``; a valid one (waypoints ``(t, x, y)`` in
        base_link at the image stamp) goes to the tracker, taking effect ``latency_ns`` later."""
        stamp_s, effective_s = self._t(stamp_ns), self._t(now_ns + latency_ns)
        record = PlanRecord(
            len(self.plans), self._t(now_ns), stamp_s, valid, reason, latency_ns / 1e6, effective_s, command
        )
        if valid:
            track = plan_from_waypoints(self._pose_at(stamp_s), stamp_s, waypoints, effective_s, record.index)
            record.points = [[float(a), float(b)] for a, b in zip(track.x, track.y, strict=True)]
            self.tracker.submit(track)
        self.plans.append(record)

    def _pose_at(self, t: float) -> tuple[float, float, float]:
        """The ego's true rear-axle pose at ``t`` (between ticks: interpolated; yaw along the shorter arc)."""
        times = np.array([p[0] for p in self.poses[-200:]])
        i = int(np.clip(np.searchsorted(times, t), 1, len(times) - 1)) if len(times) > 1 else 0
        rows = self.poses[-200:]
        if len(rows) == 1:
            return rows[0][1:]
        (t0, x0, y0, h0), (t1, x1, y1, h1) = rows[i - 1], rows[i]
        u = 0.0 if t1 == t0 else float(np.clip((t - t0) / (t1 - t0), 0.0, 1.0))
        dh = math.atan2(math.sin(h1 - h0), math.cos(h1 - h0))
        return x0 + u * (x1 - x0), y0 + u * (y1 - y0), h0 + u * dh

    def _rejection_summary(self) -> str:
        valid = sum(p.valid for p in self.plans)
        reasons = Counter(reason_kind(p.reason) for p in self.plans if not p.valid)
        top = ", ".join(f"{n}× {r}" for r, n in reasons.most_common(3))
        return f"{len(self.plans)} plans, {valid} valid" + (f"; rejected: {top}" if top else "")

    def summary(self) -> dict[str, Any]:
        """Plans made / valid / used / rejected (with reasons), latency, and the ego's last state."""
        made = [p for p in self.plans if p.stamp_s is not None]
        last_t = self.trace.t[-1] if self.trace.t else 0.0
        used = [p for p in made if p.valid and p.effective_s <= last_t]
        latencies = [p.latency_ms for p in made]
        return {
            "instants": len(self.plans),
            "made": len(made),
            "valid": sum(p.valid for p in made),
            "used": len(used),
            "rejected": sum(not p.valid for p in made),
            "no_observation": len(self.plans) - len(made),
            "rejection_reasons": dict(Counter(reason_kind(p.reason) for p in made if not p.valid).most_common()),
            "latency_ms": {
                "mean": float(np.mean(latencies)) if latencies else None,
                "max": float(np.max(latencies)) if latencies else None,
                "measured": self.options.latency_ms is None,
            },
            "input_problems": dict(self.problems.most_common(10)),
        }


def reason_kind(reason: str) -> str:
    """A rejection reason without its details: the text before the first ``:`` or `` (``, whichever comes first
    (``no valid candidate of 4 (#0: ...)`` → ``no valid candidate of 4``)."""
    cuts = [i for i in (reason.find(":"), reason.find(" (")) if i > 0]
    return reason[: min(cuts)].strip() if cuts else reason.strip()
