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

Topics: :mod:`.topics` (the table); inputs: :mod:`.inputs`; when to plan: :mod:`.schedule`; the worker:
:mod:`.worker`.
"""

from __future__ import annotations

import array
import functools
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String

from wam_diff2_ros.core.planning import EngineLike
from wam_diff2_ros.core.samples import InputProblem

from . import autoware, qos
from .diagnostics import KeyedThrottle, NodeHealth
from .input_rows import InputRow, input_names, input_table, receive
from .model_slot import EngineFactory, ModelSlot
from .outputs import output_types
from .param_guard import (
    declare_typed_parameters,
    evaluate_change,
    parameter_type,
    screen_set_request,
    type_refusal,
)
from .params import DEFAULT_NODE_NAME, PARAMETER_SPECS, SPEC_BY_NAME, NodeConfig, ParameterError
from .process import ContextLogger, run_node
from .runtime import PlannerRuntime
from .topics import OUTPUT_TOPICS, QUESTION_TOPIC
from .worker import WORKER_JOIN_TIMEOUT_S, Worker

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
#: At process exit the running decode is cancelled (between two denoising steps); a worker still busy after
#: this (a non-cancellable stage such as the vision encoder) is abandoned (daemon thread).
EXIT_JOIN_TIMEOUT_S = 3.0


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
        preprocess=config.preprocess,
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
        self.ignored_parameters: list[str] = []
        self._config: NodeConfig | None = None
        self._runtime: PlannerRuntime | None = None
        self._health = NodeHealth(self.get_fully_qualified_name().lstrip("/"))
        self._model = ModelSlot(self._health, self.get_logger(), self._publish_diagnostics)
        self._throttle = KeyedThrottle(5.0)
        self._state_lock = threading.RLock()
        self._input_subscriptions: list[Any] = []
        self._work_timers: list[Any] = []
        self._input_group = ReentrantCallbackGroup()
        self._timer_group = ReentrantCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._worker = Worker(
            self.get_logger(),
            self.now_ns,
            self._health,
            lambda: self._runtime,
            lambda key: self._throttle.allow(key, time.monotonic_ns()),
            self._publish_diagnostics,
        )
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(1.0, self._publish_diagnostics, callback_group=self._diag_group)
        self._autostart_timer = None
        self.add_on_set_parameters_callback(self._on_set_parameters)
        declared_types = {spec.name: parameter_type(spec) for spec in PARAMETER_SPECS}
        if hasattr(self, "add_pre_set_parameters_callback"):  # rclpy >= Iron: `param set ... 5` for a double
            self.add_pre_set_parameters_callback(
                lambda params: screen_set_request(params, declared_types, self._current_value)
            )
        if self.get_parameter("autostart").value is True:
            self._autostart_timer = self.create_timer(0.0, self._autostart)
        else:
            self.get_logger().info("autostart is false: waiting for the lifecycle configure transition")

    # ---- helpers

    def now_ns(self) -> int:
        """The node clock (sim time aware) in ns."""
        return self.get_clock().now().nanoseconds

    @property
    def _engine(self) -> EngineLike | None:
        """The loaded engine (None: not loaded)."""
        return self._model.engine

    @property
    def _outputs(self) -> dict[str, Any]:
        """The output publishers by name (the worker publishes on them)."""
        return self._worker.publishers

    def _autostart(self) -> None:
        if self._autostart_timer is not None:
            self._autostart_timer.cancel()
            self.destroy_timer(self._autostart_timer)
            self._autostart_timer = None
        if self.trigger_configure() == SUCCESS:
            self.trigger_activate()

    def _current_value(self, name: str) -> Any:
        return self.get_parameter(name).value

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
        refusal = type_refusal(parameters)
        if refusal:
            self.get_logger().warning(f"parameter change refused: {refusal}")
            return SetParametersResult(successful=False, reason=refusal)
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
            self._restart_diagnostics_timer(config.diagnostics_period_s)
        if self._worker.active and ("planning.rate_hz" in names or "detection.rate_hz" in names):
            self._start_work_timers(config)

    def _start_work_timers(self, config: NodeConfig) -> None:
        """(Re-)create the planning and detection timers (none for rate 0)."""
        self._cancel_work_timers()
        for kind, period_s in config.cadence.timers():
            flag = functools.partial(self._worker.flag, kind)
            self._work_timers.append(self.create_timer(period_s, flag, callback_group=self._timer_group))

    def _cancel_work_timers(self) -> None:
        timers, self._work_timers = self._work_timers, []
        for timer in timers:
            timer.cancel()
            self.destroy_timer(timer)

    def _restart_diagnostics_timer(self, period_s: float) -> None:
        self._diag_timer.cancel()
        self.destroy_timer(self._diag_timer)
        self._diag_timer = self.create_timer(period_s, self._publish_diagnostics, callback_group=self._diag_group)

    def _publish_diagnostics(self) -> None:
        runtime = self._runtime
        now = self.now_ns()
        ages = runtime.buffer.input_ages_ms(now) if runtime is not None else {}
        try:
            self._diagnostics_pub.publish(self._health.diagnostics(now, ages))
        except Exception as exc:  # publishing during shutdown
            self.get_logger().debug(f"diagnostics not published: {exc}")

    # ---- lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load the model, create publishers."""
        logger = self.get_logger()
        try:
            config = NodeConfig.from_parameters(self._parameter_values())
            missing = autoware.configure_problem(config)  # a requested Autoware feature without its messages
            if missing:
                raise ParameterError(missing)
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
        self._health.follower_timeout_s = autoware.FOLLOWER_TIMEOUT_S if config.autoware_outputs else 0.0
        if config.autoware_outputs and config.rate_hz > 0 and 1.0 / config.rate_hz > autoware.FOLLOWER_TIMEOUT_S:
            logger.warning(
                f"planning.rate_hz {config.rate_hz:g} plans less often than Autoware's trajectory follower's "
                f"{autoware.FOLLOWER_TIMEOUT_S:g} s timeout allows"
            )
        if config.planning.detection_max_new_tokens < 512 and config.detection_rate_hz > 0:
            logger.warning(
                f"detection.max_new_tokens is {config.planning.detection_max_new_tokens}; "
                "detection answers usually need >= 512 tokens and will be cut short"
            )
        self._restart_diagnostics_timer(config.diagnostics_period_s)
        if not self._model.load(config, self._engine_factory):
            return FAILURE
        self._config = config
        assert self._engine is not None
        self._runtime = PlannerRuntime(config, self._engine, clock=self.now_ns)
        if self._runtime.msgs is None:
            logger.warning(
                f"{self._runtime.msgs_problem}: ~/output/trajectory, ~/output/detections and "
                "~/input/driving_command are disabled; Path, markers, debug image, answers and diagnostics work"
            )
        self._create_publishers(self._runtime)
        self._start_view(config)
        self._health.set_lifecycle("inactive")
        logger.info(
            f"configured: model {self._engine.name} on {getattr(self._engine, 'device', '?')}, cameras "
            f"{list(config.camera_names)}, planning at {config.rate_hz:g} Hz"
            + (" (each new front image)" if config.rate_hz == 0 else "")
        )
        self._publish_diagnostics()
        return SUCCESS

    def _create_publishers(self, runtime: PlannerRuntime) -> None:
        """One publisher per output the runtime can produce (:func:`~.outputs.output_types`)."""
        self._destroy_publishers()
        self._worker.publishers = {
            name: self.create_publisher(msg_type, OUTPUT_TOPICS[name], qos.publisher_qos(name))
            for name, msg_type in output_types(
                runtime.msgs, runtime.vision_msgs, runtime.config.debug_image, runtime.autoware_msgs
            ).items()
        }

    def _start_view(self, config: NodeConfig) -> None:
        """The live Foxglove view when ``viewer.port`` is set; one that cannot start is logged, never fatal."""
        self._stop_view()
        if config.viewer_port <= 0:
            return
        from wam_diff2_ros.viewer import LiveView, ViewerSettings, ViewerUnavailableError

        view = LiveView(
            ViewerSettings(config.viewer_port, config.viewer_host), config.debug_camera_pose, self.get_name()
        )
        try:
            view.start()
        except ViewerUnavailableError as exc:
            self.get_logger().error(f"no live view: {exc}")
            return
        self._worker.view = view
        self.get_logger().info(f"live view (Foxglove WebSocket, no authentication) on {view.url}")

    def _stop_view(self) -> None:
        view, self._worker.view = self._worker.view, None
        if view is not None:
            view.close()

    def _destroy_publishers(self) -> None:
        pubs, self._worker.publishers = self._worker.publishers, {}
        for publisher in pubs.values():
            self.destroy_publisher(publisher)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Subscribe, start timers and the worker."""
        config = self._config
        if config is None:
            return FAILURE
        if self._engine is None:  # unloaded on deactivate
            if not self._model.load(config, self._engine_factory):
                return FAILURE
            assert self._engine is not None
            self._runtime = PlannerRuntime(config, self._engine, clock=self.now_ns)
        runtime = self._runtime
        assert runtime is not None
        runtime.reset()
        self._create_subscriptions(config, runtime)
        with self._state_lock:
            self._start_work_timers(config)
            self._worker.start()
        self._health.set_lifecycle("active")
        self.get_logger().info("active")
        self._publish_diagnostics()
        return super().on_activate(state)

    def _create_subscriptions(self, config: NodeConfig, runtime: PlannerRuntime) -> None:
        """One subscription per row of the input table (:mod:`.inputs`), and the question topic."""
        rows = input_table(config, runtime)
        subs = [
            self.create_subscription(
                row.msg_type,
                row.topic,
                self._input_callback(row),
                qos.input_qos(config.qos[row.qos_key]),
                callback_group=self._input_group,
            )
            for row in rows
        ]
        if config.vqa_enabled:
            subs.append(
                self.create_subscription(
                    String,
                    QUESTION_TOPIC,
                    lambda msg: self._worker.ask(str(msg.data)),
                    qos.question_qos(),
                    callback_group=self._input_group,
                )
            )
        self._health.register_inputs(input_names(rows))
        self._input_subscriptions = subs

    def _input_callback(self, row: InputRow) -> Callable[[Any], None]:
        def callback(msg: Any) -> None:
            problem = receive(row, msg, self.now_ns())
            self._after_input(row.name, problem)
            config = self._config  # planning.rate_hz may change live
            if problem is None and row.is_image and config is not None and config.cadence.plans_on_image(row.index):
                self._worker.flag("plan")

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

    def _stop_activity(self, join_timeout_s: float = WORKER_JOIN_TIMEOUT_S) -> bool:
        stopped = self._worker.stop(join_timeout_s)  # False: still busy, abandoned
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
            self._model.close()
            self._runtime = None
        else:
            self._model.release_cache()
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
        self._stop_view()
        if stopped:
            self._model.close()
        else:
            self._model.abandon()
        self._runtime = None
        self._config = None

    def get_logger(self) -> ContextLogger:
        """The node's logger; to stderr once the process is stopping (see :class:`~.process.ContextLogger`)."""
        return ContextLogger(super().get_logger(), self.context)

    def begin_exit(self) -> None:
        """Process exit, first step: nothing more is published, and a running decode stops before its next
        denoising step (``engine.cancel()``; that plan is not published)."""
        self._worker.begin_exit()
        self._model.cancel()

    def close(self) -> None:
        """Stop the worker (cancelling its decode) and unload the model (process exit)."""
        self.begin_exit()
        self._release_all(EXIT_JOIN_TIMEOUT_S)


def main(
    argv: Sequence[str] | None = None, engine_factory: EngineFactory | None = None, exit_process: bool = True
) -> int:
    """Console script ``wam_diff2_node`` (``ros2 run wam_diff2_ros wam_diff2_node --ros-args ...``): the node in
    its process (:func:`~.process.run_node`: exit code 0 on SIGINT/SIGTERM)."""
    return run_node(lambda: WamDiff2Node(engine_factory=engine_factory), argv, exit_process)


if __name__ == "__main__":
    sys.exit(main())
