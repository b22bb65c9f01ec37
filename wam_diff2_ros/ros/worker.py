"""The node's one worker thread: due flags → plan / answer / detect → publish (:class:`Worker`).

Timers and the image callback only flag work (:meth:`Worker.flag`), the question subscription queues
questions (:meth:`Worker.ask`); the thread wakes, takes everything due and runs it in
:data:`~.schedule.ORDER`, so inference never runs in an executor callback. Each step's messages are published
only while the worker is active in the epoch it was started in: a deactivate (or process exit) during an
inference discards its result.

A step's failure (the engine raised) is reported in ``/diagnostics`` and the log, and the worker goes on; a
cancelled decode (process exit) publishes nothing.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from std_msgs.msg import String

from wam_diff2_ros.core.engine.decoding import DecodeCancelledError
from wam_diff2_ros.core.samples import InputProblem, clean_reason, problem_kind

from .diagnostics import NodeHealth
from .runtime import AnswerCycle, DetectionCycle, PlanCycle, PlannerRuntime
from .schedule import ORDER

WORKER_JOIN_TIMEOUT_S = 30.0
QUESTION_QUEUE = 10


def default_command_warning(source: str, command: Any) -> str:
    """The warning logged once, at the first plan made with ``command.default``."""
    value = getattr(command, "value", command)
    if source == "fixed":
        return (
            f"command.source fixed: every plan uses command.default {value!r}; no route, turn signal or command "
            "topic is read, so the plan does not follow the route at junctions"
        )
    return f"planning with command.default {value!r}: no (fresh) command from command.source {source}"


class Worker:
    """The worker thread and what it publishes (see the module docstring).

    ``runtime`` returns the node's current runtime (None: nothing to do), ``allow(key)`` whether a throttled
    message of that key may be logged now, ``publish_diagnostics`` publishes ``/diagnostics`` at once.
    """

    def __init__(
        self,
        logger: Any,
        clock: Callable[[], int],
        health: NodeHealth,
        runtime: Callable[[], PlannerRuntime | None],
        allow: Callable[[str], bool],
        publish_diagnostics: Callable[[], None],
    ) -> None:
        self._logger = logger
        self._clock = clock
        self._health = health
        self._runtime = runtime
        self._allow = allow
        self._publish_diagnostics = publish_diagnostics
        self.publishers: dict[str, Any] = {}
        self.view: Any = None  # a wam_diff2_ros.viewer.LiveView when viewer.port is set
        self._lock = threading.Lock()
        self._active = False
        self._epoch = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._due = dict.fromkeys(("plan", "detect"), False)
        self._questions: deque[str] = deque(maxlen=QUESTION_QUEUE)
        self._last_problem_kinds: tuple[str, ...] = ()
        self._default_command_warned = False

    # ---- control (executor threads)

    def flag(self, kind: str) -> None:
        """``"plan"`` or ``"detect"`` is due (a timer fired, or a front image arrived at planning rate 0)."""
        with self._wake:
            self._due[kind] = True
            self._wake.notify()

    def ask(self, question: str) -> None:
        """Queue a question (the oldest is dropped beyond :data:`QUESTION_QUEUE`)."""
        with self._wake:
            self._questions.append(question)
            self._wake.notify()

    def start(self) -> None:
        """Forget what was due, start a new epoch and the thread."""
        with self._wake:
            self._due = dict.fromkeys(self._due, False)
            self._questions.clear()
        with self._lock:
            self._epoch += 1
            self._active = True
            self._stop.clear()
            thread = threading.Thread(target=self._work, args=(self._epoch,), name="wam_diff2_worker", daemon=True)
            self._thread = thread
            thread.start()

    @property
    def active(self) -> bool:
        """Started and not stopped (its results are published)."""
        with self._lock:
            return self._active

    def is_alive(self) -> bool:
        """Whether the thread runs."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def begin_exit(self) -> None:
        """Nothing more is published; the thread ends after its current step."""
        with self._lock:
            self._active = False
            self._epoch += 1
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    def stop(self, timeout_s: float = WORKER_JOIN_TIMEOUT_S) -> bool:
        """Stop the thread; False when it is still busy after ``timeout_s`` (it is abandoned)."""
        self.begin_exit()
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                self._logger.warning("the worker is still finishing an inference; its result is discarded")
                return False
        return True

    # ---- the thread

    def _take(self) -> dict[str, Any]:
        """Wait for work; everything due, by kind (a question is taken one at a time)."""
        with self._wake:
            while not (any(self._due.values()) or self._questions or self._stop.is_set()):
                self._wake.wait(0.5)
            taken: dict[str, Any] = {kind: True for kind, due in self._due.items() if due}
            self._due = dict.fromkeys(self._due, False)
            if self._questions:
                taken["answer"] = self._questions.popleft()
            return taken

    def _work(self, epoch: int) -> None:
        while not self._stop.is_set():
            taken = self._take()
            if self._stop.is_set():
                break
            runtime = self._runtime()
            if runtime is None:
                continue
            steps = {
                "plan": functools.partial(self._plan_step, runtime, epoch),
                "answer": functools.partial(self._answer_step, runtime, taken.get("answer", ""), epoch),
                "detect": functools.partial(self._detect_step, runtime, epoch),
            }
            for kind in ORDER:  # planning first, detection last: neither starves the other
                if kind in taken:
                    self._run_step(kind, steps[kind])

    def _run_step(self, kind: str, step: Callable[[], None]) -> None:
        what = {"plan": "planning", "detect": "detection"}.get(kind, kind)
        try:
            step()
        except DecodeCancelledError:  # shutting down: nothing is published
            self._logger.info(f"{what} decode cancelled (shutting down); nothing published")
        except Exception as exc:  # model/engine failure: report, keep going
            message = clean_reason(f"{type(exc).__name__}: {exc}")
            now = self._clock()
            if kind == "detect":
                self._health.detection_error(message, now)
            elif kind == "plan":
                self._health.plan_error(message, now)
            else:
                self._publish("answer", String(data=f"[no answer: {message}]"))
            if self._allow(f"error: {what}: {problem_kind(message)}"):
                self._logger.error(f"{what} failed: {message}")
            self._publish_diagnostics()

    # ---- publishing

    def _publishing(self, epoch: int) -> bool:
        with self._lock:
            return self._active and epoch == self._epoch

    def _publish(self, name: str, msg: Any) -> None:
        publisher = self.publishers.get(name)
        if publisher is not None and msg is not None:
            publisher.publish(msg)

    def _want_debug(self) -> bool:
        publisher = self.publishers.get("debug_image")
        return publisher is not None and publisher.get_subscription_count() > 0

    def _warn_throttled(self, key: str, message: str) -> None:
        if self._allow(key):
            self._logger.warning(message)

    def _report_problems(self, where: str, problems: Sequence[InputProblem]) -> None:
        # Keyed by kind (input + reason without numbers): one WARN per kind per diagnostics.warn_throttle_s,
        # and /diagnostics is published at once only when the kinds change (numbers update on the timer).
        kinds = tuple(f"{where}: {p.kind}" for p in problems)
        for kind, problem in zip(kinds, problems, strict=True):
            self._warn_throttled(kind, f"no {where}: {problem}")
        if kinds != self._last_problem_kinds:
            self._last_problem_kinds = kinds
            self._publish_diagnostics()

    def _plan_step(self, runtime: PlannerRuntime, epoch: int) -> None:
        cycle: PlanCycle = runtime.plan(self._clock(), debug_image=self._want_debug())
        if cycle.idle or not self._publishing(epoch):
            return
        now = self._clock()
        view = self.view
        if view is not None:  # a reference into a one-slot mailbox: never waits for a client
            view.submit(cycle.view_update(now))
        if cycle.result is None:
            self._health.plan_blocked(cycle.problems, now)
            self._report_problems("plan", cycle.problems)
            return
        result = cycle.result
        for name, msg in cycle.outputs():
            self._publish(name, msg)
        self._last_problem_kinds = ()
        if result.observation.command_source == "default" and not self._default_command_warned:
            self._default_command_warned = True
            self._logger.warning(default_command_warning(runtime.config.command_source, result.observation.command))
        withheld = cycle.withheld
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
            self._logger.info(
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
        cycle: DetectionCycle = runtime.detect(self._clock(), debug_image=self._want_debug())
        if not self._publishing(epoch):
            return
        now = self._clock()
        if cycle.result is None:
            self._health.detection_blocked(cycle.problems, now)
            self._report_problems("detection", cycle.problems)
            return
        result = cycle.result
        for name, msg in cycle.outputs():
            self._publish(name, msg)
        self._health.detection_done(
            len(result.detections),
            result.reason,
            result.timing.with_end_to_end(cycle.end_to_end_ms),
            now,
            result.stamp_ns,
        )
        self._logger.info(
            f"detection on {result.camera}: {len(result.detections)} box(es)"
            + (f" ({result.reason})" if result.reason else "")
            + f"; {result.timing.summary()}",
            throttle_duration_sec=10.0,
        )

    def _answer_step(self, runtime: PlannerRuntime, question: str, epoch: int) -> None:
        cycle: AnswerCycle = runtime.answer(question, self._clock())
        if not self._publishing(epoch):
            return
        if cycle.result is None:
            reason = "; ".join(str(p) for p in cycle.problems)
            self._logger.warning(f"question not answered: {reason}")
            self._publish("answer", String(data=f"[no answer: {reason}]"))
            return
        self._publish("answer", cycle.message)
        self._logger.info(f"answered {question!r} ({cycle.result.timing.summary()})")
