"""Health bookkeeping and ``/diagnostics`` messages of the node (no rclpy node needed).

:class:`NodeHealth` is updated by the callbacks and the worker (thread-safe) and turned into a
``diagnostic_msgs/DiagnosticArray`` by :meth:`NodeHealth.diagnostics` with four statuses, named
``<node>: model``, ``<node>: inputs``, ``<node>: planning`` and ``<node>: detection``:

* model: OK when loaded (name, device, dtype), WARN while not configured/active, ERROR when loading
  failed or the last inference raised (message: the reason);
* inputs: OK when no input had a problem within ``recent_s``; WARN naming each input and reason
  otherwise (dropped messages: corrupt JPEG, unknown encoding, NaN, ...). Values: age, received and
  dropped counts and the last problem per input;
* planning: OK after a valid plan; WARN when the last cycle made no plan (which input and why) or
  the answer was invalid (reason); ERROR when the engine raised. Values: last plan age, invalid-answer
  rate over the last plans, per-stage timing of the last plan, end-to-end latency;
* detection: as planning, for detection (OK "off" when disabled).

:class:`KeyedThrottle` limits repeated log lines per key: the *kind* of problem (input and rule, numbers
and object reprs removed: :func:`~wam_diff2_ros.core.samples.problem_kind`), so one problem whose
numbers change every cycle ("newest image is 24354 ms old") is logged once per period, with its current
numbers.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from wam_diff2_ros.core.planning import StageTiming
from wam_diff2_ros.core.samples import InputProblem
from wam_diff2_ros.core.units import NS_PER_S

from .conversions import ns_to_stamp

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


class KeyedThrottle:
    """``allow(key, now_ns)`` is True at most once per ``period_s`` for each key (keys: kinds of problems;
    at most ``max_keys`` are remembered, the oldest forgotten first)."""

    def __init__(self, period_s: float, max_keys: int = 256) -> None:
        self.period_ns = round(period_s * NS_PER_S)
        self.max_keys = max_keys
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def allow(self, key: str, now_ns: int) -> bool:
        """Whether a message with ``key`` may be emitted now (and, if so, remember that it was)."""
        with self._lock:
            last = self._last.get(key)
            if last is not None and 0 <= now_ns - last < self.period_ns:
                return False
            self._last.pop(key, None)
            self._last[key] = now_ns
            while len(self._last) > self.max_keys:
                del self._last[next(iter(self._last))]
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._last)


@dataclass
class InputStatus:
    """Counters of one input."""

    received: int = 0
    dropped: int = 0
    last_problem: str = ""
    last_problem_ns: int = 0


def _kv(key: str, value: object) -> KeyValue:
    return KeyValue(key=key, value=str(value))


def _status(name: str, level: bytes, message: str, values: Iterable[KeyValue], hardware_id: str) -> DiagnosticStatus:
    return DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id, values=list(values))


class NodeHealth:
    """What the node knows about itself, for ``/diagnostics``."""

    def __init__(self, node_name: str, invalid_rate_window: int = 20, recent_s: float = 5.0) -> None:
        self.node_name = node_name
        self.recent_ns = round(recent_s * NS_PER_S)
        self._lock = threading.Lock()
        self.lifecycle_state = "unconfigured"
        self.model_state = "not loaded"
        self.model_error = ""
        self.model_name = ""
        self.model_path = ""
        self.device = ""
        self.dtype = ""
        self.inputs: dict[str, InputStatus] = {}
        self.detection_enabled = False
        # > 0: a consumer drops a trajectory older than this (Autoware's follower, 0.9 s): WARN when valid plans
        # come further apart (autoware.outputs)
        self.follower_timeout_s = 0.0
        self._invalid: deque[bool] = deque(maxlen=invalid_rate_window)
        self._plan = _StageHealth()
        self._detection = _StageHealth()

    def reset_window(self, invalid_rate_window: int) -> None:
        """Start a new invalid-answer window of the given length."""
        with self._lock:
            self._invalid = deque(maxlen=invalid_rate_window)

    # ---- updates

    def set_model(
        self, state: str, *, error: str = "", name: str = "", path: str = "", device: str = "", dtype: str = ""
    ) -> None:
        """Record the model's state (``loaded``, ``not loaded``, ``failed``, ``loading``)."""
        with self._lock:
            self.model_state, self.model_error = state, error
            if name or state != "loaded":
                self.model_name, self.model_path, self.device, self.dtype = name, path, device, dtype

    def set_lifecycle(self, state: str) -> None:
        """Record the lifecycle state label."""
        with self._lock:
            self.lifecycle_state = state

    def register_inputs(self, names: Iterable[str]) -> None:
        """Start counting the given inputs (others are forgotten)."""
        with self._lock:
            self.inputs = {name: InputStatus() for name in names}

    def input_ok(self, name: str) -> None:
        """A message of ``name`` was accepted."""
        with self._lock:
            self.inputs.setdefault(name, InputStatus()).received += 1

    def input_dropped(self, name: str, reason: str, now_ns: int) -> None:
        """A message of ``name`` was dropped for ``reason``."""
        with self._lock:
            status = self.inputs.setdefault(name, InputStatus())
            status.received += 1
            status.dropped += 1
            status.last_problem, status.last_problem_ns = reason, now_ns

    def plan_blocked(self, problems: Iterable[InputProblem], now_ns: int) -> None:
        """A planning cycle made no plan because of ``problems``."""
        with self._lock:
            self._plan.blocked([str(p) for p in problems], now_ns)

    def plan_done(self, valid: bool, reason: str, timing: StageTiming, now_ns: int, stamp_ns: int) -> None:
        """A plan was published (``valid``) or an invalid answer was reported (``reason``)."""
        with self._lock:
            self._invalid.append(not valid)
            self._plan.done(valid, reason, timing, now_ns, stamp_ns)

    def plan_withheld(self, reason: str, timing: StageTiming, now_ns: int, stamp_ns: int) -> None:
        """A plan was made but not published (stale, or no transform into planning.frame_id): WARN with
        ``reason``; not counted as an invalid answer."""
        with self._lock:
            self._plan.withheld(reason, timing, stamp_ns)

    def plan_error(self, message: str, now_ns: int) -> None:
        """The engine raised while planning."""
        with self._lock:
            self._plan.error(message, now_ns)

    def detection_blocked(self, problems: Iterable[InputProblem], now_ns: int) -> None:
        """A detection cycle had no usable image."""
        with self._lock:
            self._detection.blocked([str(p) for p in problems], now_ns)

    def detection_done(self, count: int, reason: str, timing: StageTiming, now_ns: int, stamp_ns: int) -> None:
        """Detections were published (``reason``: parser notes, '' when clean)."""
        with self._lock:
            self._detection.done(True, reason, timing, now_ns, stamp_ns, count=count)

    def detection_error(self, message: str, now_ns: int) -> None:
        """The engine raised while detecting."""
        with self._lock:
            self._detection.error(message, now_ns)

    @property
    def invalid_rate(self) -> float:
        """Share of invalid answers among the last plans (0 without plans)."""
        with self._lock:
            return sum(self._invalid) / len(self._invalid) if self._invalid else 0.0

    # ---- message

    def diagnostics(self, now_ns: int, ages_ms: Mapping[str, float | None] | None = None) -> DiagnosticArray:
        """The ``DiagnosticArray`` for ``now_ns`` (``ages_ms``: input ages from the observation buffer)."""
        ages = dict(ages_ms or {})
        hardware_id = self.node_name
        with self._lock:
            statuses = [
                self._model_status(hardware_id),
                self._inputs_status(now_ns, ages, hardware_id),
                self._follower_check(
                    self._plan.status(
                        f"{self.node_name}: planning", now_ns, hardware_id, self._invalid_values(), "plan"
                    )
                ),
                (
                    self._detection.status(f"{self.node_name}: detection", now_ns, hardware_id, [], "detection")
                    if self.detection_enabled
                    else _status(f"{self.node_name}: detection", OK, "off (detection.rate_hz is 0)", [], hardware_id)
                ),
            ]
        array = DiagnosticArray()
        array.header.stamp = ns_to_stamp(now_ns)
        array.status = statuses
        return array

    def _follower_check(self, status: DiagnosticStatus) -> DiagnosticStatus:
        """WARN on an OK planning status when valid plans come slower than the follower's timeout."""
        interval = self._plan.interval_s
        if self.follower_timeout_s > 0 and interval is not None:
            status.values.append(_kv("valid_plan_interval_s", f"{interval:.2f}"))
            if status.level == OK and interval > self.follower_timeout_s:
                status.level = WARN
                status.message = (
                    f"valid plans come {interval:.2f} s apart, slower than the trajectory follower's "
                    f"{self.follower_timeout_s:g} s timeout: it stops between plans"
                )
        return status

    def _invalid_values(self) -> list[KeyValue]:
        rate = sum(self._invalid) / len(self._invalid) if self._invalid else 0.0
        return [_kv("invalid_answer_rate", f"{rate:.2f}"), _kv("invalid_rate_window", len(self._invalid))]

    def _model_status(self, hardware_id: str) -> DiagnosticStatus:
        values = [
            _kv("state", self.model_state),
            _kv("lifecycle", self.lifecycle_state),
            _kv("model", self.model_name),
            _kv("path", self.model_path),
            _kv("device", self.device),
            _kv("dtype", self.dtype),
        ]
        name = f"{self.node_name}: model"
        if self.model_state == "failed" or self.model_error:
            return _status(name, ERROR, self.model_error or "model failed", values, hardware_id)
        if self.model_state != "loaded":
            return _status(
                name, WARN, f"model {self.model_state} (lifecycle {self.lifecycle_state})", values, hardware_id
            )
        if self.lifecycle_state != "active":
            return _status(name, WARN, f"model loaded, node {self.lifecycle_state}", values, hardware_id)
        return _status(name, OK, f"loaded {self.model_name} on {self.device} ({self.dtype})", values, hardware_id)

    def _inputs_status(self, now_ns: int, ages: Mapping[str, float | None], hardware_id: str) -> DiagnosticStatus:
        values: list[KeyValue] = []
        problems: list[str] = []
        for name in sorted(set(self.inputs) | set(ages)):
            status = self.inputs.get(name, InputStatus())
            age = ages.get(name)
            values.append(_kv(f"{name} age_ms", "never received" if age is None else f"{age:.0f}"))
            values.append(_kv(f"{name} received", status.received))
            values.append(_kv(f"{name} dropped", status.dropped))
            if status.last_problem:
                values.append(_kv(f"{name} last_problem", status.last_problem))
                if now_ns - status.last_problem_ns < self.recent_ns:
                    problems.append(f"{name}: {status.last_problem}")
        name = f"{self.node_name}: inputs"
        if problems:
            return _status(name, WARN, "dropped: " + "; ".join(problems), values, hardware_id)
        return _status(name, OK, "inputs ok", values, hardware_id)


class _StageHealth:
    """Planning or detection bookkeeping (caller holds the lock)."""

    def __init__(self) -> None:
        self.level = WARN
        self.message = "no result yet"
        self.last_done_ns: int | None = None
        self.interval_s: float | None = None  # between the last two valid results
        self.last_stamp_ns: int | None = None
        self.timing = StageTiming()
        self.valid = 0
        self.invalid = 0
        self.blocked_cycles = 0
        self.withheld_count = 0
        self.errors = 0
        self.count = 0

    def blocked(self, problems: list[str], now_ns: int) -> None:
        self.level, self.message = WARN, "no result: " + "; ".join(problems)
        self.blocked_cycles += 1

    def done(self, valid: bool, reason: str, timing: StageTiming, now_ns: int, stamp_ns: int, count: int = 0) -> None:
        self.timing, self.last_stamp_ns, self.count = timing, stamp_ns, count
        if valid:
            self.valid += 1
            if self.last_done_ns is not None:
                self.interval_s = (now_ns - self.last_done_ns) / NS_PER_S
            self.last_done_ns = now_ns
            self.level, self.message = OK, "ok" + (f" ({reason})" if reason else "")
        else:
            self.invalid += 1
            self.level, self.message = WARN, f"invalid model answer: {reason}"

    def withheld(self, reason: str, timing: StageTiming, stamp_ns: int) -> None:
        self.timing, self.last_stamp_ns = timing, stamp_ns
        self.withheld_count += 1
        self.level, self.message = WARN, reason

    def error(self, message: str, now_ns: int) -> None:
        self.errors += 1
        self.level, self.message = ERROR, f"inference failed: {message}"

    def status(self, name: str, now_ns: int, hardware_id: str, extra: list[KeyValue], what: str) -> DiagnosticStatus:
        age = "never" if self.last_done_ns is None else f"{(now_ns - self.last_done_ns) / NS_PER_S:.2f}"
        t = self.timing
        values = [
            _kv(f"last_{what}_age_s", age),
            _kv("valid", self.valid),
            _kv("invalid", self.invalid),
            _kv("blocked_cycles", self.blocked_cycles),
            _kv("withheld", self.withheld_count),
            _kv("errors", self.errors),
            *extra,
            _kv("preprocess_ms", f"{t.preprocess_ms:.1f}"),
            _kv("vision_ms", f"{t.vision_ms:.1f}"),
            _kv("prefill_ms", f"{t.prefill_ms:.1f}"),
            _kv("denoise_ms", f"{t.denoise_ms:.1f}"),
            _kv("commit_ms", f"{t.commit_ms:.1f}"),
            _kv("total_ms", f"{t.total_ms:.1f}"),
            _kv("end_to_end_ms", f"{t.end_to_end_ms:.1f}"),
        ]
        if what == "detection":
            values.append(_kv("detections", self.count))
        return _status(name, self.level, self.message, values, hardware_id)
