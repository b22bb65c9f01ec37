"""``wam_diff2_node``: the WAM-Diff2 planner as a ROS 2 lifecycle node (thin wiring of :mod:`.runtime`).

Lifecycle:

* configure: validate parameters (:class:`~.params.NodeConfig`), load the model (``model.*``), create
  publishers. Bad parameters or checkpoint → FAILURE, the node stays alive and unconfigured, the log
  and ``/diagnostics`` say why;
* activate: subscriptions, planning/detection timers and the worker thread;
* deactivate: stop them, forget the inputs, return cached device memory (with
  ``model.unload_on_deactivate`` the model is unloaded and activate reloads it);
* cleanup / shutdown: everything released, the model unloaded.

With ``autostart`` (default true) configure and activate run right after start, for plain
``ros2 run wam_diff2_ros wam_diff2_node``.

Threads: subscription callbacks only convert the header and store the message
(:class:`~.runtime.PlannerRuntime` ``on_*``); timers (node clock, sim-time aware) only flag work;
one worker thread plans, detects and answers, so inference never runs in a callback and the
executor (a ``MultiThreadedExecutor``) keeps serving parameters, diagnostics and inputs meanwhile.

Topics (private, remappable; ``<n>`` = camera index in ``cameras.names``):

======================================  ==================================================
``~/input/image_<n>``                   ``sensor_msgs/Image`` or ``sensor_msgs/CompressedImage``
                                        (``cameras.transports``)
``~/input/camera_info_<n>``             ``sensor_msgs/CameraInfo`` (optional)
``~/input/command``                     ``std_msgs/String`` left/straight/right/unknown
``~/input/driving_command``             ``wam_diff2_ros/DrivingCommand`` (same role; ROS allows one
                                        type per topic name, so it has its own name)
``~/input/odometry``                    ``nav_msgs/Odometry`` (twist in the child frame)
``~/input/acceleration``                ``geometry_msgs/AccelWithCovarianceStamped`` (optional)
``~/input/question``                    ``std_msgs/String`` (VQA)
``~/output/path``                       ``nav_msgs/Path`` in ``planning.frame_id`` (base_link)
``~/output/trajectory``                 ``wam_diff2_ros/PlannedTrajectory`` (same frame)
``~/output/path_fixed``                 ``nav_msgs/Path`` in the odometry's frame (odom/map): the plan
                                        transformed by the ego pose at the image stamp
``~/output/trajectory_fixed``           ``wam_diff2_ros/PlannedTrajectory`` in the odometry's frame
``~/output/markers``                    ``visualization_msgs/MarkerArray`` (path and detections)
``~/output/detections``                 ``wam_diff2_ros/DetectionArray``
``~/output/detections_2d``              ``vision_msgs/Detection2DArray`` (where vision_msgs is installed)
``~/output/answer``                     ``std_msgs/String``
``~/debug/image``                       ``sensor_msgs/Image`` (rgb8)
``/diagnostics``                        ``diagnostic_msgs/DiagnosticArray``
======================================  ==================================================
"""

from __future__ import annotations

import argparse
import array
import contextlib
import functools
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import AccelWithCovarianceStamped
from nav_msgs.msg import Odometry, Path
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.utilities import remove_ros_args
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from wam_diff2_ros.core.decoding import DecodeCancelledError
from wam_diff2_ros.core.planning import EngineLike, release_device_cache
from wam_diff2_ros.core.samples import InputProblem, clean_reason, problem_kind

from . import qos
from .dds import ensure_fastdds_profile
from .diagnostics import KeyedThrottle, NodeHealth
from .param_guard import coerce_set_request, declare_typed_parameters, evaluate_change, parameter_type
from .params import DEFAULT_NODE_NAME, PARAMETER_SPECS, SPEC_BY_NAME, NodeConfig, ParameterError
from .runtime import AnswerCycle, DetectionCycle, PlanCycle, PlannerRuntime

EngineFactory = Callable[[NodeConfig], EngineLike]
SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
WORKER_JOIN_TIMEOUT_S = 30.0
#: At process exit the running decode is cancelled (between two denoising steps); a worker still busy after
#: this (a non-cancellable stage such as the vision encoder) is abandoned (daemon thread).
EXIT_JOIN_TIMEOUT_S = 3.0
SWITCH_INTERVAL_S = 0.001


def _plain(value: Any) -> Any:
    """A parameter value as validation reads it (rclpy hands array parameters over as ``array.array``)."""
    return list(value) if isinstance(value, array.array) else value


def load_engine(config: NodeConfig) -> EngineLike:
    """The default engine factory: :meth:`wam_diff2_ros.core.engine.Engine.load` with ``model.*``."""
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.demo import resolve_model

    return Engine.load(
        resolve_model(config.model_path),
        device=config.device,
        dtype=config.dtype,
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
    )


class WamDiff2Node(LifecycleNode):
    """The lifecycle node (see the module docstring)."""

    def __init__(
        self, node_name: str = DEFAULT_NODE_NAME, engine_factory: EngineFactory | None = None, **kwargs: Any
    ) -> None:
        super().__init__(node_name, **kwargs)
        # Typed, with ranges; overrides of the wrong type or out of range are kept aside for configure to report.
        self._rejected_overrides = declare_typed_parameters(self)
        self._engine_factory = engine_factory or load_engine
        self._engine: EngineLike | None = None
        self._engine_path: str | None = None
        self.ignored_parameters: list[str] = []
        self._config: NodeConfig | None = None
        self._runtime: PlannerRuntime | None = None
        self._health = NodeHealth(self.get_fully_qualified_name().lstrip("/"))
        self._throttle = KeyedThrottle(5.0)
        self._state_lock = threading.RLock()
        self._active = False
        self._epoch = 0
        self._outputs: dict[str, Any] = {}
        self._input_subscriptions: list[Any] = []
        self._work_timers: list[Any] = []
        self._input_group = ReentrantCallbackGroup()
        self._timer_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._plan_due = False
        self._detect_due = False
        self._questions: deque[str] = deque(maxlen=10)
        self._last_problem_kinds: tuple[str, ...] = ()
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics, callback_group=self._diag_group)
        self._autostart_timer = None
        self.add_on_set_parameters_callback(self._on_set_parameters)
        if hasattr(self, "add_pre_set_parameters_callback"):  # rclpy >= Iron: `param set ... 5` for a double
            declared = {spec.name: parameter_type(spec) for spec in PARAMETER_SPECS}
            self.add_pre_set_parameters_callback(lambda params: coerce_set_request(params, declared))
        if self.get_parameter("autostart").value is True:
            self._autostart_timer = self.create_timer(0.0, self._autostart)
        else:
            self.get_logger().info("autostart is false: waiting for the lifecycle configure transition")

    # ---- helpers

    def now_ns(self) -> int:
        """The node clock (sim time aware) in ns."""
        return self.get_clock().now().nanoseconds

    def _autostart(self) -> None:
        if self._autostart_timer is not None:
            self._autostart_timer.cancel()
            self.destroy_timer(self._autostart_timer)
            self._autostart_timer = None
        if self.trigger_configure() == SUCCESS:
            self.trigger_activate()

    def _parameter_values(self) -> dict[str, Any]:
        values = {spec.name: _plain(self.get_parameter(spec.name).value) for spec in PARAMETER_SPECS}
        values.update(self._rejected_overrides)  # reported by validation until a valid value is set
        overrides = getattr(self, "_parameter_overrides", {}) or {}
        for name in overrides:
            if name not in SPEC_BY_NAME and name not in ("use_sim_time", "start_type_description_service"):
                values[name] = overrides[name].value  # unknown names are reported by validation
        return values

    # ---- parameter changes

    def _on_set_parameters(self, parameters: list[Any]) -> SetParametersResult:
        """Validate a set request; apply live what applies live, refuse the rest with the reason."""
        changes = {p.name: _plain(p.value) for p in parameters if p.name in SPEC_BY_NAME}
        if not changes:
            return SetParametersResult(successful=True)
        with self._state_lock:
            current = self._parameter_values()
            verdict = evaluate_change(current, changes, configured=self._config is not None)
            if verdict.successful and verdict.live:
                try:
                    config = NodeConfig.from_parameters({**current, **changes})
                except ParameterError as exc:  # cannot happen after evaluate_change; never apply half
                    return SetParametersResult(successful=False, reason=str(exc))
                self._apply_live(config, verdict.live)
            if verdict.successful:
                for name in changes:
                    self._rejected_overrides.pop(name, None)
        if not verdict.successful:
            self.get_logger().warning(f"parameter change refused: {verdict.reason}")
            return SetParametersResult(successful=False, reason=verdict.reason)
        applied = ", ".join(f"{name}={changes[name]!r}" for name in sorted(changes))
        self.get_logger().info(f"parameters {'applied' if verdict.live else 'set'}: {applied}")
        return SetParametersResult(successful=True)

    def _apply_live(self, config: NodeConfig, names: Sequence[str]) -> None:
        """Use ``config`` from now on: the next plan, detection or answer reads it; timers whose period changed
        are re-created."""
        self._config = config
        if self._runtime is not None:
            self._runtime.apply_config(config)
        self._throttle = KeyedThrottle(config.warn_throttle_s)
        self._health.detection_enabled = config.detection_rate_hz > 0
        if "diagnostics.invalid_rate_window" in names:
            self._health.reset_window(config.invalid_rate_window)
        if "diagnostics.period_s" in names:
            self._diag_timer.cancel()
            self.destroy_timer(self._diag_timer)
            self._diag_timer = self.create_timer(
                config.diagnostics_period_s, self._publish_diagnostics, callback_group=self._diag_group
            )
        if self._active and ("planning.rate_hz" in names or "detection.rate_hz" in names):
            self._start_work_timers(config)

    def _start_work_timers(self, config: NodeConfig) -> None:
        """(Re-)create the planning and detection timers (none for rate 0)."""
        self._cancel_work_timers()
        if config.rate_hz > 0:
            self._work_timers.append(
                self.create_timer(1.0 / config.rate_hz, self._flag_plan, callback_group=self._timer_group)
            )
        if config.detection_rate_hz > 0:
            self._work_timers.append(
                self.create_timer(1.0 / config.detection_rate_hz, self._flag_detect, callback_group=self._timer_group)
            )

    def _cancel_work_timers(self) -> None:
        timers, self._work_timers = self._work_timers, []
        for timer in timers:
            timer.cancel()
            self.destroy_timer(timer)

    def _warn_throttled(self, key: str, message: str) -> None:
        if self._throttle.allow(key, time.monotonic_ns()):
            self.get_logger().warning(message)

    def _publish_diagnostics(self) -> None:
        runtime = self._runtime
        now = self.now_ns()
        ages = runtime.buffer.input_ages_ms(now) if runtime is not None else {}
        try:
            self._diagnostics_pub.publish(self._health.diagnostics(now, ages))
        except Exception as exc:  # publishing during shutdown
            self.get_logger().debug(f"diagnostics not published: {exc}")

    def _report_problems(self, where: str, problems: Sequence[InputProblem]) -> None:
        # Keyed by kind (input + reason without numbers): one WARN per kind per diagnostics.warn_throttle_s,
        # and /diagnostics is published at once only when the kinds change (numbers update on the timer).
        kinds = tuple(f"{where}: {p.kind}" for p in problems)
        for kind, problem in zip(kinds, problems, strict=True):
            self._warn_throttled(kind, f"no {where}: {problem}")
        if kinds != self._last_problem_kinds:
            self._last_problem_kinds = kinds
            self._publish_diagnostics()

    # ---- lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load the model, create publishers."""
        logger = self.get_logger()
        try:
            config = NodeConfig.from_parameters(self._parameter_values())
        except ParameterError as exc:
            logger.error(f"configure failed: {exc}")
            self._health.set_model("failed", error=f"configure failed: {exc}")
            self._publish_diagnostics()
            return FAILURE
        self.ignored_parameters = sorted(set(config.values) - set(SPEC_BY_NAME))
        if self.ignored_parameters:
            logger.warning(f"ignoring parameters this node does not use: {', '.join(self.ignored_parameters)}")
        self._throttle = KeyedThrottle(config.warn_throttle_s)
        self._health.reset_window(config.invalid_rate_window)
        self._health.detection_enabled = config.detection_rate_hz > 0
        if config.planning.detection_max_new_tokens < 512 and config.detection_rate_hz > 0:
            logger.warning(
                f"detection.max_new_tokens is {config.planning.detection_max_new_tokens}; "
                "detection answers usually need >= 512 tokens and will be cut short"
            )
        self._diag_timer.cancel()
        self.destroy_timer(self._diag_timer)
        self._diag_timer = self.create_timer(
            config.diagnostics_period_s, self._publish_diagnostics, callback_group=self._diag_group
        )
        if not self._load_engine(config):
            return FAILURE
        self._config = config
        assert self._engine is not None
        self._runtime = PlannerRuntime(config, self._engine, clock=self.now_ns)
        if self._runtime.msgs is None:
            logger.warning(
                f"{self._runtime.msgs_problem}: ~/output/trajectory, ~/output/detections and "
                "~/input/driving_command are disabled; Path, markers, debug image, answers and diagnostics work"
            )
        self._create_publishers(config)
        self._health.set_lifecycle("inactive")
        logger.info(
            f"configured: model {self._engine.name} on {getattr(self._engine, 'device', '?')}, cameras "
            f"{list(config.camera_names)}, planning at {config.rate_hz:g} Hz"
            + (" (each new front image)" if config.rate_hz == 0 else "")
        )
        self._publish_diagnostics()
        return SUCCESS

    def _load_engine(self, config: NodeConfig) -> bool:
        logger = self.get_logger()
        if self._engine is not None and self._engine_path == config.model_path:
            return True
        self._close_engine()
        self._health.set_model("loading", path=config.model_path)
        self._publish_diagnostics()
        started = time.perf_counter()
        try:
            engine = self._engine_factory(config)
        except Exception as exc:  # CheckpointError, device errors, out of memory ...
            logger.error(f"configure failed: cannot load the model from {config.model_path!r}: {exc}")
            self._health.set_model("failed", error=f"cannot load {config.model_path!r}: {exc}", path=config.model_path)
            self._publish_diagnostics()
            return False
        self._engine = engine
        self._engine_path = config.model_path
        device, dtype = str(getattr(engine, "device", "?")), str(getattr(engine, "dtype", "?")).replace("torch.", "")
        self._health.set_model("loaded", name=engine.name, path=config.model_path, device=device, dtype=dtype)
        logger.info(f"model {engine.name} loaded on {device} ({dtype}) in {time.perf_counter() - started:.1f} s")
        if config.warmup:
            self._warmup(engine, config)
        return True

    def _warmup(self, engine: EngineLike, config: NodeConfig) -> None:
        import numpy as np

        started = time.perf_counter()
        try:
            engine.generate(
                "<image>Describe the scene.",
                [np.full((224, 224, 3), 128, dtype=np.uint8)],
                decode=config.decode.with_overrides(max_new_tokens=config.decode.block_size),
            )
            self.get_logger().info(f"warm-up decode took {time.perf_counter() - started:.1f} s")
        except Exception as exc:
            self.get_logger().warning(f"warm-up decode failed: {exc}")

    def _close_engine(self) -> None:
        engine, self._engine = self._engine, None
        self._engine_path = None
        if engine is not None and hasattr(engine, "close"):
            try:
                engine.close()
            except Exception as exc:
                self.get_logger().warning(f"closing the engine failed: {exc}")
        self._health.set_model("not loaded")

    def _create_publishers(self, config: NodeConfig) -> None:
        self._destroy_publishers()
        out = qos.output_qos()
        pubs = {
            "path": self.create_publisher(Path, "~/output/path", out),
            "path_fixed": self.create_publisher(Path, "~/output/path_fixed", out),
            "markers": self.create_publisher(MarkerArray, "~/output/markers", out),
            "answer": self.create_publisher(String, "~/output/answer", out),
        }
        if config.debug_image:
            pubs["debug_image"] = self.create_publisher(Image, "~/debug/image", qos.debug_image_qos())
        runtime = self._runtime
        if runtime is not None and runtime.msgs is not None:
            pubs["trajectory"] = self.create_publisher(runtime.msgs.PlannedTrajectory, "~/output/trajectory", out)
            pubs["trajectory_fixed"] = self.create_publisher(
                runtime.msgs.PlannedTrajectory, "~/output/trajectory_fixed", out
            )
            pubs["detections"] = self.create_publisher(runtime.msgs.DetectionArray, "~/output/detections", out)
        if runtime is not None and runtime.vision_msgs is not None:
            pubs["detections_2d"] = self.create_publisher(
                runtime.vision_msgs.Detection2DArray, "~/output/detections_2d", out
            )
        self._outputs = pubs

    def _destroy_publishers(self) -> None:
        for publisher in self._outputs.values():
            self.destroy_publisher(publisher)
        self._outputs = {}

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Subscribe, start timers and the worker."""
        config = self._config
        if config is None:
            return FAILURE
        if self._engine is None:  # unloaded on deactivate
            if not self._load_engine(config):
                return FAILURE
            assert self._engine is not None
            self._runtime = PlannerRuntime(config, self._engine, clock=self.now_ns)
        runtime = self._runtime
        assert runtime is not None
        runtime.reset()
        self._create_subscriptions(config, runtime)
        with self._wake:
            self._plan_due = self._detect_due = False
            self._questions.clear()
        with self._state_lock:
            self._start_work_timers(config)
            self._epoch += 1
            self._active = True
            self._stop.clear()
            self._worker = threading.Thread(
                target=self._work, args=(self._epoch,), name="wam_diff2_worker", daemon=True
            )
            self._worker.start()
        self._health.set_lifecycle("active")
        self.get_logger().info("active")
        self._publish_diagnostics()
        return super().on_activate(state)

    def _create_subscriptions(self, config: NodeConfig, runtime: PlannerRuntime) -> None:
        group = self._input_group
        subs = []
        names = []
        for index, camera in enumerate(config.cameras):
            topic = f"~/input/image_{index}"
            names.append(runtime.image_input_name(index))
            if camera.transport == "compressed":
                callback = self._image_callback(index, runtime.on_compressed_image)
                subs.append(
                    self.create_subscription(
                        CompressedImage, topic, callback, qos.input_qos(config.qos["image"]), callback_group=group
                    )
                )
            else:
                callback = self._image_callback(index, runtime.on_image)
                subs.append(
                    self.create_subscription(
                        Image, topic, callback, qos.input_qos(config.qos["image"]), callback_group=group
                    )
                )
            names.append(f"camera_info_{index} ({camera.name})")
            subs.append(
                self.create_subscription(
                    CameraInfo,
                    f"~/input/camera_info_{index}",
                    self._input_callback(
                        f"camera_info_{index} ({camera.name})",
                        lambda msg, t, i=index: runtime.on_camera_info(i, msg, t),
                    ),
                    qos.input_qos(config.qos["camera_info"]),
                    callback_group=group,
                )
            )
        inputs: list[tuple[type, str, Callable[[Any, int], InputProblem | None], str]] = [
            (Odometry, "~/input/odometry", runtime.on_odometry, "odometry"),
            (AccelWithCovarianceStamped, "~/input/acceleration", runtime.on_acceleration, "acceleration"),
            (String, "~/input/command", runtime.on_command, "command"),
        ]
        if runtime.msgs is not None:
            inputs.append(
                (runtime.msgs.DrivingCommand, "~/input/driving_command", runtime.on_driving_command, "command")
            )
        for msg_type, topic, handler, qos_name in inputs:
            subs.append(
                self.create_subscription(
                    msg_type,
                    topic,
                    self._input_callback(qos_name, handler),
                    qos.input_qos(config.qos[qos_name]),
                    callback_group=group,
                )
            )
        names += ["odometry", "acceleration", "command"]
        if config.vqa_enabled:
            subs.append(
                self.create_subscription(
                    String, "~/input/question", self._on_question, qos.question_qos(), callback_group=group
                )
            )
        self._health.register_inputs(names)
        self._input_subscriptions = subs

    def _input_callback(self, name: str, handler: Callable[[Any, int], InputProblem | None]) -> Callable[[Any], None]:
        def callback(msg: Any) -> None:
            now = self.now_ns()
            try:
                problem = handler(msg, now)
            except Exception as exc:  # never let one message kill the node
                problem = InputProblem(name, f"unexpected error: {type(exc).__name__}: {exc}")
            self._after_input(name, problem)

        return callback

    def _image_callback(
        self, index: int, handler: Callable[[int, Any, int], InputProblem | None]
    ) -> Callable[[Any], None]:
        runtime = self._runtime
        name = runtime.image_input_name(index) if runtime is not None else f"image_{index}"

        def callback(msg: Any) -> None:
            now = self.now_ns()
            try:
                problem = handler(index, msg, now)
            except Exception as exc:
                problem = InputProblem(name, f"unexpected error: {type(exc).__name__}: {exc}")
            self._after_input(name, problem)
            config = self._config  # planning.rate_hz may change live
            if problem is None and index == 0 and config is not None and config.rate_hz == 0:
                self._flag_plan()

        return callback

    def _after_input(self, name: str, problem: InputProblem | None) -> None:
        if problem is None:
            self._health.input_ok(name)
            return
        self._health.input_dropped(problem.input, problem.reason, self.now_ns())
        key = f"drop: {problem.kind}"
        if self._throttle.allow(key, time.monotonic_ns()):
            self.get_logger().warning(f"dropped a message on {problem.input}: {problem.reason}")
            self._publish_diagnostics()

    def _on_question(self, msg: String) -> None:
        with self._wake:
            self._questions.append(str(msg.data))
            self._wake.notify()

    def _flag_plan(self) -> None:
        with self._wake:
            self._plan_due = True
            self._wake.notify()

    def _flag_detect(self) -> None:
        with self._wake:
            self._detect_due = True
            self._wake.notify()

    def _stop_worker(self, timeout_s: float = WORKER_JOIN_TIMEOUT_S) -> bool:
        """Stop the worker thread; False when it is still busy after ``timeout_s`` (it is abandoned)."""
        with self._state_lock:
            self._active = False
            self._epoch += 1
            worker, self._worker = self._worker, None
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout_s)
            if worker.is_alive():
                self.get_logger().warning("the worker is still finishing an inference; its result is discarded")
                return False
        return True

    def _stop_activity(self, join_timeout_s: float = WORKER_JOIN_TIMEOUT_S) -> bool:
        stopped = self._stop_worker(join_timeout_s)
        with self._state_lock:
            self._cancel_work_timers()
        for subscription in self._input_subscriptions:
            self.destroy_subscription(subscription)
        self._input_subscriptions = []
        if self._runtime is not None:
            self._runtime.reset()
        return stopped

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop subscriptions, timers and the worker; free cached device memory."""
        self._stop_activity()
        if self._config is not None and self._config.unload_on_deactivate:
            self._close_engine()
            self._runtime = None
        elif self._engine is not None:
            release_device_cache(getattr(self._engine, "device", "cpu"))
        self._health.set_lifecycle("inactive")
        self.get_logger().info("deactivated")
        self._publish_diagnostics()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release publishers and the model."""
        self._release_all()
        self._health.set_lifecycle("unconfigured")
        self.get_logger().info("cleaned up")
        self._publish_diagnostics()
        return SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything (from any state)."""
        self._release_all()
        self._health.set_lifecycle("finalized")
        return SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release everything and go back to unconfigured."""
        self.get_logger().error(f"error during a transition from {state.label}; releasing everything")
        self._release_all()
        self._health.set_lifecycle("unconfigured")
        return SUCCESS

    def _release_all(self, join_timeout_s: float = WORKER_JOIN_TIMEOUT_S) -> None:
        stopped = self._stop_activity(join_timeout_s)
        self._destroy_publishers()
        if stopped:
            self._close_engine()
        else:  # the busy worker holds the engine: closing it would wait for the decode; the process exit frees it
            self._engine = None
            self._engine_path = None
        self._runtime = None
        self._config = None

    def begin_exit(self) -> None:
        """Process exit, first step: nothing more is published, and a running decode stops before its next
        denoising step (``engine.cancel()``; that plan is not published)."""
        with self._state_lock:
            self._active = False
            self._epoch += 1
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        engine = self._engine
        cancel = getattr(engine, "cancel", None)
        if callable(cancel):
            cancel()

    def close(self) -> None:
        """Stop the worker (cancelling its decode) and unload the model (process exit)."""
        self.begin_exit()
        self._release_all(EXIT_JOIN_TIMEOUT_S)

    # ---- worker

    def _work(self, epoch: int) -> None:
        while not self._stop.is_set():
            with self._wake:
                while not (self._plan_due or self._detect_due or self._questions or self._stop.is_set()):
                    self._wake.wait(0.5)
                plan, self._plan_due = self._plan_due, False
                question = self._questions.popleft() if self._questions else None
                # Everything due runs in this order; detection after planning, so neither starves the other.
                detect, self._detect_due = self._detect_due, False
            if self._stop.is_set():
                break
            runtime = self._runtime
            if runtime is None:
                continue
            if plan:
                self._run_step("planning", functools.partial(self._plan_step, runtime, epoch))
            if question is not None:
                self._run_step("answer", functools.partial(self._answer_step, runtime, question, epoch))
            if detect:
                self._run_step("detection", functools.partial(self._detect_step, runtime, epoch))

    def _run_step(self, what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except DecodeCancelledError:  # shutting down: nothing is published
            self.get_logger().info(f"{what} decode cancelled (shutting down); nothing published")
        except Exception as exc:  # model/engine failure: report, keep going
            message = clean_reason(f"{type(exc).__name__}: {exc}")
            now = self.now_ns()
            if what == "detection":
                self._health.detection_error(message, now)
            elif what == "planning":
                self._health.plan_error(message, now)
            else:
                self._publish("answer", String(data=f"[no answer: {message}]"))
            if self._throttle.allow(f"error: {what}: {problem_kind(message)}", time.monotonic_ns()):
                self.get_logger().error(f"{what} failed: {message}")
            self._publish_diagnostics()

    def _publishing(self, epoch: int) -> bool:
        with self._state_lock:
            return self._active and epoch == self._epoch

    def _publish(self, name: str, msg: Any) -> None:
        publisher = self._outputs.get(name)
        if publisher is not None and msg is not None:
            publisher.publish(msg)

    def _want_debug(self) -> bool:
        publisher = self._outputs.get("debug_image")
        return publisher is not None and publisher.get_subscription_count() > 0

    def _plan_step(self, runtime: PlannerRuntime, epoch: int) -> None:
        cycle: PlanCycle = runtime.plan(self.now_ns(), debug_image=self._want_debug())
        if cycle.idle or not self._publishing(epoch):
            return
        now = self.now_ns()
        if cycle.result is None:
            self._health.plan_blocked(cycle.problems, now)
            self._report_problems("plan", cycle.problems)
            return
        result = cycle.result
        self._publish("path", cycle.path)
        self._publish("path_fixed", cycle.path_fixed)
        self._publish("trajectory", cycle.trajectory)
        self._publish("trajectory_fixed", cycle.trajectory_fixed)
        self._publish("markers", cycle.markers)
        self._publish("debug_image", cycle.debug_image)
        self._last_problem_kinds = ()
        withheld = result.reason if cycle.stale else ""
        if not withheld and result.valid and cycle.path is None:
            withheld = cycle.frame_problem  # planning.frame_id cannot be served
        if withheld:
            self._health.plan_withheld(withheld, result.timing, now, result.stamp_ns)
            self._warn_throttled(f"withheld: {problem_kind(withheld)}", f"no path published: {withheld}")
            self._publish_diagnostics()
            return
        note = cycle.frame_problem if result.valid else result.reason
        self._health.plan_done(result.valid, note, result.timing, now, result.stamp_ns)
        if result.valid and cycle.frame_problem:
            self._warn_throttled(f"frame: {problem_kind(cycle.frame_problem)}", cycle.frame_problem)
        if result.valid:
            self.get_logger().info(
                f"plan {len(result.waypoints)} waypoints, command {result.observation.command.value}; "
                f"{result.timing.summary()}, steps/block {list(result.steps_per_block)}",
                throttle_duration_sec=10.0,
            )
        else:
            self._warn_throttled(
                f"invalid: {problem_kind(result.reason)}",
                f"invalid model answer, no path published: {result.reason}; {result.timing.summary()}",
            )
            self._publish_diagnostics()

    def _detect_step(self, runtime: PlannerRuntime, epoch: int) -> None:
        cycle: DetectionCycle = runtime.detect(self.now_ns(), debug_image=self._want_debug())
        if not self._publishing(epoch):
            return
        now = self.now_ns()
        if cycle.result is None:
            self._health.detection_blocked(cycle.problems, now)
            self._report_problems("detection", cycle.problems)
            return
        result = cycle.result
        self._publish("detections", cycle.detections)
        self._publish("detections_2d", cycle.detections_2d)
        self._publish("markers", cycle.markers)
        self._publish("debug_image", cycle.debug_image)
        self._health.detection_done(
            len(result.detections),
            result.reason,
            result.timing.with_end_to_end(cycle.end_to_end_ms),
            now,
            result.stamp_ns,
        )
        self.get_logger().info(
            f"detection on {result.camera}: {len(result.detections)} box(es)"
            + (f" ({result.reason})" if result.reason else "")
            + f"; {result.timing.summary()}",
            throttle_duration_sec=10.0,
        )

    def _answer_step(self, runtime: PlannerRuntime, question: str, epoch: int) -> None:
        cycle: AnswerCycle = runtime.answer(question, self.now_ns())
        if not self._publishing(epoch):
            return
        if cycle.result is None:
            reason = "; ".join(str(p) for p in cycle.problems)
            self.get_logger().warning(f"question not answered: {reason}")
            self._publish("answer", String(data=f"[no answer: {reason}]"))
            return
        self._publish("answer", cycle.message)
        self.get_logger().info(f"answered {question!r} ({cycle.result.timing.summary()})")


def spin_until_shutdown(executor: Executor, context: Any = None, poll_s: float = 0.5) -> int:
    """``executor.spin()`` that survives rclpy's wait-set race; returns how many times it recovered.

    With a multi-threaded executor, a callback that destroys a subscription (deactivate) while the spinning
    thread builds its wait set can make rclpy raise ``InvalidHandle`` ("destruction was requested") out of
    ``spin()`` (its subscriptions' QoS event handlers are added to the wait set without the guard the other
    entities get), which would end the node. Here the wait set is simply rebuilt on the next turn.
    """
    recovered = 0
    # Executor.spin()'s own loop condition (the shutdown flag has no public accessor).
    while rclpy.ok(context=context) and not getattr(executor, "_is_shutdown", False):
        try:
            executor.spin_once(timeout_sec=poll_s)
        except InvalidHandle:
            recovered += 1
    return recovered


def main(
    argv: Sequence[str] | None = None, engine_factory: EngineFactory | None = None, exit_process: bool = True
) -> int:
    """Console script ``wam_diff2_node`` (``ros2 run wam_diff2_ros wam_diff2_node --ros-args ...``).

    SIGINT and SIGTERM (rclpy's handlers) end the spin; the running decode is cancelled, the worker, executor,
    node and context are shut down in that order, and the exit code is 0 (launch's convention for a clean
    stop). With ``exit_process`` (the console script) the process then ends with ``os._exit`` after the exit
    handlers ran and the streams were flushed: the interpreter's own teardown of torch, transformers and the
    DDS libraries took ~1.4 s more (measured, idle node) and only freed memory the process gives back anyway.
    """
    args = list(sys.argv if argv is None else argv)
    cli = remove_ros_args(args)[1:]
    parser = argparse.ArgumentParser(
        prog="wam_diff2_node",
        description="WAM-Diff2 planner node. Parameters: --ros-args --params-file config/wam_diff2.yaml "
        "-p model.path:=/path/to/checkpoint",
    )
    parser.parse_args(cli)
    # The worker thread runs Python-heavy decoding; with CPython's default 5 ms GIL switch interval the
    # executor threads (which release and re-take the GIL many times per callback) starve behind it and
    # sensor messages are lost (measured: ~30 % of 10 Hz images received during CPU inference; ~95 % at
    # 1 ms). A 1 ms interval keeps callbacks flowing at negligible cost.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    applied = ensure_fastdds_profile()
    rclpy.init(args=args)
    node = WamDiff2Node(engine_factory=engine_factory)
    if applied:
        node.get_logger().info(f"Fast DDS profile: {', '.join(f'{k}={v}' for k, v in applied.items())}")
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    try:
        spin_until_shutdown(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.begin_exit()  # cancel the running decode first: it stops while the rest shuts down
        executor.shutdown(timeout_sec=5.0)  # no callback runs while the node is torn down
        node.close()
        node.destroy_node()
        rclpy.try_shutdown()
    if exit_process:
        _exit_now(0)
    return 0


def _exit_now(code: int) -> None:
    """End the process now: exit handlers, flushed streams, then ``os._exit`` (no interpreter teardown)."""
    import atexit
    import logging

    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
