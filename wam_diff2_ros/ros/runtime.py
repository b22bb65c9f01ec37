"""The node's message-level core without an rclpy node: messages in, output messages out.

:class:`PlannerRuntime` is what the node wires to DDS and what the rosbag replay tool drives with
bag messages and bag time, so both run exactly the same observation → prompt → decode → parse →
output-message path:

1. for every input message call the matching ``on_*`` method with its receive time (node clock, or
   the bag's receive time); each returns None or the :class:`InputProblem` that made it drop the
   message (corrupt JPEG, unknown encoding, NaN, zero stamp, unknown command ...);
2. at each planning instant call :meth:`PlannerRuntime.plan` with the current time; the returned
   :class:`PlanCycle` holds the Path / PlannedTrajectory / MarkerArray / debug Image to publish, or the
   problems that prevented a plan (``idle``: no new front image, nothing to report);
3. likewise :meth:`PlannerRuntime.detect` at detection instants and :meth:`PlannerRuntime.answer` for
   questions.

Timing: ``end_to_end_ms`` is ``clock() − image stamp`` when the output is built, with the clock given
to the constructor (the node clock; a replay passes its bag clock).

Frames: ``path`` / ``trajectory`` / ``markers`` are in ``planning.frame_id``: base_link as answered, or
the odometry's frame (then transformed by the ego pose at the image stamp, never relabelled); ``path_fixed``
/ ``trajectory_fixed`` are always in the odometry's frame (``header.frame_id`` of ``nav_msgs/Odometry``).

Confidence gate: a valid plan whose confidence (its least confident waypoint, ``core/confidence.py``) is
below ``planning.min_confidence`` (> 0) becomes invalid likewise ("low confidence: ...", ``PlanCycle.unsure``);
a plan without a confidence (0) is withheld too when the gate is on.

Age gate: when a plan is ready and ``clock() − image stamp`` exceeds ``planning.max_plan_age_s``, the
result becomes invalid ("stale plan: ... s old ...", ``PlanCycle.stale``): no Path, trajectories with
``valid=false``. A replay's clock is the bag time of the instant, which stands still while the model
decodes, so there a plan is stale only when its image already was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from wam_diff2_ros.core.frames import transform_waypoints
from wam_diff2_ros.core.image_headers import compressed_header_problem
from wam_diff2_ros.core.observation import ObservationBuffer
from wam_diff2_ros.core.planning import (
    AnswerResult,
    DetectionResult,
    EngineLike,
    InferencePipeline,
    PlanningInputError,
    PlanResult,
)
from wam_diff2_ros.core.samples import CommandSample, InputError, InputProblem
from wam_diff2_ros.core.trajectory_points import TimedPoint, TrajectoryError, trajectory_points
from wam_diff2_ros.core.turn_signal import TurnSignalHold
from wam_diff2_ros.core.units import NS_PER_MS
from wam_diff2_ros.viewer.scene import PlanUpdate

from . import autoware, candidate_outputs, conversions, outputs
from .debug_image import draw_debug_image
from .params import NodeConfig
from .route_input import RouteSource


@dataclass
class PlanCycle:
    """One planning instant: the result and its messages, or why there is none."""

    result: PlanResult | None = None
    problems: tuple[InputProblem, ...] = ()
    idle: bool = False
    path: Any = None  # nav_msgs/Path in planning.frame_id, only for a valid, fresh plan
    trajectory: Any = None  # PlannedTrajectory (None without the package's messages)
    markers: Any = None  # MarkerArray
    debug_image: Any = None  # sensor_msgs/Image
    end_to_end_ms: float = 0.0
    path_fixed: Any = None  # nav_msgs/Path in the odometry's frame (valid, fresh plan with an ego pose)
    trajectory_fixed: Any = None  # PlannedTrajectory in the odometry's frame
    stale: bool = False  # the age gate made the plan invalid
    unsure: bool = False  # the confidence gate (planning.min_confidence) made the plan invalid
    frame_problem: str = ""  # why the plan could not be put into planning.frame_id / the fixed frame
    autoware_trajectory: Any = None  # autoware_planning_msgs/Trajectory (autoware.outputs), exactly with ``path``
    autoware_candidates: Any = None  # autoware_internal_planning_msgs/CandidateTrajectories, likewise
    autoware_problem: str = ""  # why a plan made no Autoware trajectory (the plan is then invalid)

    def outputs(self) -> list[tuple[str, Any]]:
        """``(output name, message)`` to publish (the node) or write (the replay), in that order; the names
        are the node's output keys (``path`` → ``~/output/path`` ...)."""
        named = (
            ("path", self.path),
            ("path_fixed", self.path_fixed),
            ("trajectory", self.trajectory),
            ("trajectory_fixed", self.trajectory_fixed),
            ("autoware_trajectory", self.autoware_trajectory),
            ("autoware_candidates", self.autoware_candidates),
            ("markers", self.markers),
            ("debug_image", self.debug_image),
        )
        return [(name, msg) for name, msg in named if msg is not None]

    @property
    def withheld(self) -> str:
        """Why the model's plan got no Path although it was answered ("" otherwise): the age gate, the
        confidence gate, or a valid plan that ``planning.frame_id`` cannot serve."""
        result = self.result
        if result is None:
            return ""
        withheld = result.reason if self.stale or self.unsure or self.autoware_problem else ""
        if not withheld and result.valid and self.path is None:
            withheld = self.frame_problem
        return withheld

    def view_update(self, now_ns: int) -> PlanUpdate:
        """This instant for the live view (:mod:`wam_diff2_ros.viewer`): references only, no copies."""
        return PlanUpdate(
            now_ns=now_ns,
            result=self.result,
            problems=tuple(str(p) for p in self.problems),
            stale=self.stale,
            note=self.withheld or self.frame_problem,
            end_to_end_ms=self.end_to_end_ms,
        )


@dataclass
class DetectionCycle:
    """One detection instant."""

    result: DetectionResult | None = None
    problems: tuple[InputProblem, ...] = ()
    detections: Any = None  # DetectionArray
    detections_2d: Any = None  # vision_msgs/Detection2DArray where installed
    markers: Any = None
    debug_image: Any = None
    end_to_end_ms: float = 0.0

    def outputs(self) -> list[tuple[str, Any]]:
        """``(output name, message)`` to publish or write, in that order."""
        named = (
            ("detections", self.detections),
            ("detections_2d", self.detections_2d),
            ("markers", self.markers),
            ("debug_image", self.debug_image),
        )
        return [(name, msg) for name, msg in named if msg is not None]


@dataclass
class AnswerCycle:
    """One answered (or unanswerable) question."""

    result: AnswerResult | None = None
    problems: tuple[InputProblem, ...] = ()
    message: Any = None  # std_msgs/String
    cameras: tuple[str, ...] = field(default_factory=tuple)


class PlannerRuntime:
    """Inputs → observation buffer; instants → pipeline → output messages (see the module docstring)."""

    def __init__(self, config: NodeConfig, engine: EngineLike, clock: Callable[[], int]) -> None:
        self.config = config
        self.clock = clock
        self.buffer = ObservationBuffer(
            config.camera_names, config.sync, config.acceleration_filter, fallback_hfov_deg=config.fallback_hfov_deg
        )
        self.pipeline = InferencePipeline(engine, config.planning)
        self.msgs, self.msgs_problem = outputs.own_messages()
        self.vision_msgs = outputs.vision_messages()
        self.autoware_msgs = autoware.autoware_messages() if config.autoware_outputs else None
        self.turn_signal = TurnSignalHold(config.turn_signal_hold_s)
        self.route = RouteSource(config.route_lookahead_m, config.route_lateral_threshold_m, config.turn_signal_hold_s)
        self.last_planned_stamp_ns: int | None = None
        self.latest_plan: PlanResult | None = None
        self.latest_detection: DetectionResult | None = None
        self._detection_marker_counts: dict[str, int] = {}

    def apply_config(self, config: NodeConfig) -> None:
        """Use ``config`` from the next input / instant on (a live parameter change: sync limits, acceleration
        filter, decoding and planning options, marker lifetimes ...); cameras must not change."""
        if config.camera_names != self.config.camera_names:
            raise ValueError("cameras cannot change on a configured runtime (reconfigure)")
        self.config = config
        self.buffer.sync = config.sync
        self.buffer.acceleration_filter = config.acceleration_filter
        self.buffer.fallback_hfov_deg = config.fallback_hfov_deg
        self.pipeline.config = config.planning
        self.turn_signal.hold_s = config.turn_signal_hold_s
        self.route.configure(config.route_lookahead_m, config.route_lateral_threshold_m, config.turn_signal_hold_s)

    # ---- inputs (each returns None, or the problem that made it drop the message)

    def _guard(self, name: str, store: Callable[[], None]) -> InputProblem | None:
        try:
            store()
        except InputError as exc:
            return InputProblem(name, str(exc))
        except (AttributeError, TypeError, ValueError) as exc:  # a malformed message object
            return InputProblem(name, f"malformed message ({type(exc).__name__}: {exc})")
        return None

    def image_input_name(self, index: int) -> str:
        """Diagnostic name of camera ``index``."""
        return self.buffer.input_name(index)

    def on_image(self, index: int, msg: Any, receive_ns: int) -> InputProblem | None:
        """A raw ``sensor_msgs/Image`` of camera ``index``."""
        frame_id = self.config.cameras[index].frame_id
        return self._guard(
            self.image_input_name(index),
            lambda: self.buffer.add_image(index, conversions.image_sample(msg, receive_ns, frame_id)),
        )

    def on_compressed_image(self, index: int, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``sensor_msgs/CompressedImage`` of camera ``index``: headers checked now (corrupt or truncated
        data is reported at arrival, :mod:`~wam_diff2_ros.core.image_headers`), pixels decoded when used."""
        frame_id = self.config.cameras[index].frame_id

        def store() -> None:
            if "compresseddepth" not in str(msg.format).lower():  # refused with its own reason
                problem = compressed_header_problem(msg.data, conversions.MAX_IMAGE_PIXELS)
                if problem is not None:
                    raise InputError(problem)
            self.buffer.add_image(index, conversions.compressed_image_sample(msg, receive_ns, frame_id))

        return self._guard(self.image_input_name(index), store)

    def on_camera_info(self, index: int, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``sensor_msgs/CameraInfo`` of camera ``index``."""
        return self._guard(
            f"camera_info_{index} ({self.config.cameras[index].name})",
            lambda: self.buffer.set_intrinsics(index, conversions.camera_info_intrinsics(msg)),
        )

    def on_odometry(self, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``nav_msgs/Odometry`` (twist for the prompt, pose for the fixed-frame plan; with ``command.source:
        route`` also the kept route's command at this pose, ``ros/route_input.py``)."""

        def store() -> None:
            sample = replace(conversions.odometry_sample(msg, receive_ns), pose=conversions.odometry_pose(msg))
            self.buffer.add_odometry(sample)
            if self.config.command_source == "route":
                self._add_command(self.route.on_pose(sample.pose, sample.stamp_ns, receive_ns))

        return self._guard("odometry", store)

    def on_acceleration(self, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``geometry_msgs/AccelWithCovarianceStamped``."""
        return self._guard(
            "acceleration", lambda: self.buffer.add_acceleration(conversions.acceleration_sample(msg, receive_ns))
        )

    def on_command(self, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``std_msgs/String`` navigation command."""
        return self._guard("command", lambda: self.buffer.add_command(conversions.command_from_string(msg, receive_ns)))

    def on_driving_command(self, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``DrivingCommand`` navigation command."""
        return self._guard(
            "command", lambda: self.buffer.add_command(conversions.command_from_driving_command(msg, receive_ns))
        )

    def on_turn_indicators(self, msg: Any, receive_ns: int) -> InputProblem | None:
        """Autoware's ``TurnIndicatorsCommand`` as the navigation command, held (``core/turn_signal.py``)."""

        def store() -> None:
            value, stamp_ns = autoware.turn_signal(msg, receive_ns)
            try:
                command = self.turn_signal.update(value, stamp_ns)
            except ValueError as exc:
                raise InputError(str(exc)) from exc
            self.buffer.add_command(CommandSample(command, stamp_ns, int(receive_ns)))

        return self._guard("command", store)

    def on_route(self, msg: Any, receive_ns: int) -> InputProblem | None:
        """A ``nav_msgs/Path`` of the route's centre line as the navigation command, held (``ros/route_input.py``)."""
        return self._guard("command", lambda: self._add_command(self.route.on_path(msg, receive_ns)))

    def _add_command(self, sample: CommandSample | None) -> None:
        if sample is not None:
            self.buffer.add_command(sample)

    def reset(self) -> None:
        """Forget all inputs and results (deactivation, replay restart)."""
        self.buffer.clear()
        self.turn_signal.reset()
        self.route.reset()
        self.last_planned_stamp_ns = None
        self.latest_plan = None
        self.latest_detection = None

    # ---- instants

    def _end_to_end_ms(self, stamp_ns: int) -> float:
        return (self.clock() - stamp_ns) / NS_PER_MS

    def plan(self, now_ns: int, debug_image: bool | None = None) -> PlanCycle:
        """Assemble an observation at ``now_ns`` and plan on it (engine errors propagate)."""
        assembled = self.buffer.assemble(
            now_ns, after_stamp_ns=self.last_planned_stamp_ns, cameras=self.config.planning_cameras
        )
        if assembled.observation is None:
            return PlanCycle(problems=assembled.problems, idle=assembled.idle)
        observation = assembled.observation
        self.last_planned_stamp_ns = observation.stamp_ns
        try:
            result = self.pipeline.plan(observation)
        except PlanningInputError as exc:
            return PlanCycle(problems=(InputProblem(self.image_input_name(0), str(exc)),))
        end_to_end = self._end_to_end_ms(result.stamp_ns)
        result = _with_end_to_end(result, end_to_end)
        cycle = PlanCycle(end_to_end_ms=end_to_end)
        age_s, limit_s = end_to_end / 1000.0, self.config.max_plan_age_s
        if result.valid and age_s > limit_s:
            cycle.stale = True
            reason = f"stale plan: {age_s:.2f} s old when ready (planning.max_plan_age_s {limit_s:g} s)"
            result = _invalid(result, reason)
        minimum = self.config.planning.min_confidence
        if result.valid and minimum > 0 and result.confidence < minimum:
            cycle.unsure = True
            reason = f"low confidence: {result.confidence:.3f} below planning.min_confidence {minimum:g}"
            result = _invalid(result, reason)
        points: tuple[TimedPoint, ...] = ()
        if result.valid and self.autoware_msgs is not None:
            points, cycle.autoware_problem = self._autoware_points(result)
            if cycle.autoware_problem:
                result = _invalid(result, cycle.autoware_problem)
        cycle.result = result
        self.latest_plan = result
        self._plan_messages(cycle, result)
        if points and cycle.path is not None:
            pose = result.observation.ego_pose
            assert pose is not None
            trajectory = autoware.trajectory_msg(points, pose.frame_id, result.stamp_ns, self.autoware_msgs)
            cycle.autoware_trajectory = trajectory
            scored = [(trajectory, result.confidence), *self._autoware_other_candidates(result)]
            cycle.autoware_candidates = autoware.candidates_msg(scored, self.autoware_msgs)
        if self.config.debug_image if debug_image is None else debug_image:
            cycle.debug_image = self._debug_image(result.observation.front, plan=result)
        return cycle

    def _autoware_points(self, result: PlanResult) -> tuple[tuple[TimedPoint, ...], str]:
        """The Autoware trajectory's points of a valid plan in the odometry's frame, or why there are none."""
        pose = result.observation.ego_pose
        if pose is None:
            return (), f"no Autoware trajectory: {result.observation.ego_pose_problem or 'no ego pose'}"
        try:
            fixed = transform_waypoints(result.waypoints, pose)
            speed = result.observation.velocity[0]
            return trajectory_points(fixed, pose, speed, self.config.wheelbase_m), ""
        except TrajectoryError as exc:
            return (), f"no Autoware trajectory: {exc}"

    def _autoware_other_candidates(self, result: PlanResult) -> list[tuple[Any, float]]:
        """The Autoware trajectories of the batch's other valid candidates with their scores (a candidate the
        kinematic gate rejected, or one that makes no finite trajectory, is not offered to a ranker)."""
        pose = result.observation.ego_pose
        others = []
        for candidate in result.candidates:
            if candidate.index == result.chosen_candidate or not candidate.valid or pose is None:
                continue
            points, problem = self._autoware_points(replace(result, waypoints=candidate.waypoints))
            if not problem:
                trajectory = autoware.trajectory_msg(points, pose.frame_id, result.stamp_ns, self.autoware_msgs)
                others.append((trajectory, candidate.score))
        return others

    def _plan_messages(self, cycle: PlanCycle, result: PlanResult) -> None:
        """Path, trajectories and markers of ``result`` in planning.frame_id and in the odometry's frame."""
        config = self.config
        pose = result.observation.ego_pose
        fixed = result
        if pose is None:
            cycle.frame_problem = f"no fixed-frame plan: {result.observation.ego_pose_problem or 'no ego pose'}"
            fixed = _invalid(result, cycle.frame_problem)
        main, main_pose = result, None
        if config.frame_id != BASE_FRAME:
            if pose is not None and pose.frame_id == config.frame_id:
                main_pose = pose
            else:
                found = f"odometry in {pose.frame_id!r}" if pose is not None else "no ego pose"
                cycle.frame_problem = (
                    f"planning.frame_id is {config.frame_id!r} but there is {found}: no plan on ~/output/path"
                )
                main = _invalid(result, cycle.frame_problem)
        main_frame = main_pose.frame_id if main_pose is not None else BASE_FRAME
        if main.valid:
            cycle.path = outputs.plan_path(main, BASE_FRAME, main_pose)
        if fixed.valid and pose is not None:
            cycle.path_fixed = outputs.plan_path(fixed, BASE_FRAME, pose)
        if self.msgs is not None:
            cycle.trajectory = outputs.plan_trajectory(main, main_frame, self.msgs, main_pose)
            fixed_frame = pose.frame_id if pose is not None else ""
            cycle.trajectory_fixed = outputs.plan_trajectory(fixed, fixed_frame, self.msgs, pose)
        cycle.markers = outputs.plan_markers(
            main, main_frame, config.marker_lifetime_s, config.planning.num_waypoints, main_pose
        )
        if config.planning.candidates > 1:  # every candidate of the batch (ros/candidate_outputs.py)
            placed = ((cycle.trajectory, main_pose), (cycle.trajectory_fixed if pose is not None else None, pose))
            for trajectory, trajectory_pose in placed:
                if trajectory is not None:
                    candidate_outputs.add_candidates(trajectory, result, self.msgs, trajectory_pose)
            faint = candidate_outputs.candidate_markers(
                main, main_frame, config.marker_lifetime_s, config.planning.candidates, main_pose
            )
            cycle.markers.markers.extend(faint.markers)

    def detect(self, now_ns: int, debug_image: bool | None = None) -> DetectionCycle:
        """Detect on the latest frame of the detection camera (engine errors propagate)."""
        index = self.config.detection_camera
        frames, problems = self.buffer.latest_frames([index], now_ns)
        if not frames:
            return DetectionCycle(problems=tuple(problems))
        frame = frames[0]
        try:
            result = self.pipeline.detect(frame)
        except PlanningInputError as exc:
            return DetectionCycle(problems=(InputProblem(self.image_input_name(index), str(exc)),))
        self.latest_detection = result
        end_to_end = self._end_to_end_ms(result.stamp_ns)
        cycle = DetectionCycle(result=result, end_to_end_ms=end_to_end)
        if self.msgs is not None:
            cycle.detections = outputs.detection_array(result, self.msgs, end_to_end)
        if self.vision_msgs is not None:
            cycle.detections_2d = outputs.detection_2d_array(result, self.vision_msgs)
        previous = self._detection_marker_counts.get(result.camera, 0)
        cycle.markers = outputs.detection_markers(
            result, self.config.detection_marker_depth_m, self.config.detection_marker_lifetime_s, previous
        )
        self._detection_marker_counts[result.camera] = len(result.detections)
        if self.config.debug_image if debug_image is None else debug_image:
            plan = self.latest_plan if index == 0 else None
            cycle.debug_image = self._debug_image(frame, detection=result, plan=plan)
        return cycle

    def answer(self, question: str, now_ns: int) -> AnswerCycle:
        """Answer ``question`` about the latest frames of the VQA cameras (engine errors propagate)."""
        if not question.strip():
            return AnswerCycle(problems=(InputProblem("question", "empty question"),))
        frames, problems = self.buffer.latest_frames(self.config.vqa_cameras, now_ns)
        if problems:
            return AnswerCycle(problems=tuple(problems))
        try:
            result = self.pipeline.answer(question, frames)
        except PlanningInputError as exc:
            return AnswerCycle(problems=(InputProblem("question", str(exc)),))
        return AnswerCycle(result=result, message=outputs.answer_msg(result), cameras=result.cameras)

    # ---- debug image

    def _debug_image(self, frame: Any, plan: PlanResult | None = None, detection: DetectionResult | None = None) -> Any:
        if detection is None and self.latest_detection is not None:
            latest = self.latest_detection
            # Boxes of a recent detection on the same camera (within two detection periods).
            recent = abs(frame.stamp_ns - latest.stamp_ns) <= 2 * self.config.detection_marker_lifetime_s * 1e9
            if latest.camera == frame.camera and recent:
                detection = latest
        waypoints = [(w.x, w.y) for w in plan.waypoints] if plan is not None and plan.valid else None
        problem = plan.reason if plan is not None and not plan.valid else ""
        caption = f"{self.pipeline.model_name} | {frame.camera}"
        if plan is not None:
            obs = plan.observation
            caption += (
                f" | {obs.command.value} v=({obs.velocity[0]:.2f},{obs.velocity[1]:.2f})"
                f" a=({obs.acceleration[0]:.2f},{obs.acceleration[1]:.2f}) | {plan.timing.total_ms:.0f} ms"
            )
            if plan.waypoint_confidence:
                caption += f" | conf {plan.confidence:.2f}"
            if plan.deadline_ms > 0:
                caption += " | on time" if plan.deadline_met else f" | late (deadline {plan.deadline_ms:g} ms)"
        pose = self.config.debug_camera_pose if frame.index == 0 else None
        rgb = draw_debug_image(
            frame.image,
            detections=detection.detections if detection is not None else (),
            waypoints_xy=waypoints,
            plan_problem=problem,
            camera_pose=pose,
            intrinsics=frame.intrinsics,
            caption=caption,
            waypoint_confidence=plan.waypoint_confidence if waypoints is not None and plan is not None else None,
        )
        return conversions.rgb_to_image_msg(rgb, frame.stamp_ns, frame.frame_id)


BASE_FRAME = "base_link"


def _with_end_to_end(result: PlanResult, end_to_end_ms: float) -> PlanResult:
    return replace(result, timing=result.timing.with_end_to_end(end_to_end_ms))


def _invalid(result: PlanResult, reason: str) -> PlanResult:
    """``result`` as an invalid plan (keeps an earlier reason); its waypoints stay as the rejected ones."""
    if not result.valid:
        return result
    return replace(result, valid=False, waypoints=(), rejected_waypoints=result.waypoints, reason=reason)
