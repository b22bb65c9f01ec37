"""The replay loop: read the bag in receive-time order, feed the node's runtime, plan at the schedule's
instants, write each instant's outputs (:func:`replay`).
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.units import NS_PER_S
from wam_diff2_ros.replay.errors import (
    EXIT_BAG_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_PLANS,
    EXIT_OK,
    ReplayModelError,
    ReplayUsageError,
)
from wam_diff2_ros.replay.interrupts import INTERRUPTS
from wam_diff2_ros.replay.outputs import Outputs
from wam_diff2_ros.replay.progress import Progress
from wam_diff2_ros.replay.records import detection_record, error_record, plan_record
from wam_diff2_ros.replay.report import finish
from wam_diff2_ros.replay.settings import (
    GROUND_TRUTH_MARGIN_S,
    MAX_CONSECUTIVE_ENGINE_ERRORS,
    ReplayOptions,
    RunPlan,
    build_config,
    read_params,
)
from wam_diff2_ros.replay.state import ReplayResult, Run
from wam_diff2_ros.replay.topics import OUTPUT_NAMES, OUTPUT_TOPICS, TopicMap, routes, select_topics
from wam_diff2_ros.ros.schedule import InstantSchedule


def _prepare_out_dir(out: Path, overwrite: bool, bag: Path | None = None) -> None:
    if out.exists() and not out.is_dir():
        raise ReplayUsageError(f"--out {out}: exists and is not a directory")
    source = None if bag is None else Path(bag).resolve()
    if source is not None and (
        (source.is_dir() and out.resolve().is_relative_to(source))
        or any(source.is_relative_to((out / name).resolve()) for name in OUTPUT_NAMES)
    ):
        raise ReplayUsageError(f"--out {out}: its outputs and the bag {bag} overlap; choose another folder")
    existing = [name for name in OUTPUT_NAMES if (out / name).exists()]
    if existing and not overwrite:
        raise ReplayUsageError(
            f"--out {out}: already holds replay outputs ({', '.join(existing)}); pass --overwrite to replace them"
        )
    for name in existing:  # only the replay's own outputs; anything else in the folder stays
        path = out / name
        if path.is_dir() and not path.is_symlink():  # a link is removed, never what it leads to
            shutil.rmtree(path)
        else:
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _odometry_point(msg: Any) -> tuple[int, float, float, float] | None:
    """``(header stamp ns, x, y, yaw)`` of an Odometry message; None when unusable."""
    from wam_diff2_ros.ros.conversions import odometry_track_point

    try:
        row = odometry_track_point(msg)
    except (AttributeError, TypeError, ValueError):
        return None
    return row if row[0] > 0 and all(math.isfinite(v) for v in row[1:]) else None


def _bag_duration_s(bag: Path) -> float | None:
    """The duration from a bag folder's ``metadata.yaml`` (None for a bare storage file)."""
    import yaml

    folder = bag.parent if bag.name == "metadata.yaml" else bag
    try:
        info = yaml.safe_load((folder / "metadata.yaml").read_text(encoding="utf-8"))["rosbag2_bagfile_information"]
        return int(info["duration"]["nanoseconds"]) / NS_PER_S
    except Exception:
        return None


def replay(
    options: ReplayOptions,
    engine_factory: Callable[[Any], Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> ReplayResult:
    """Run the replay described by ``options`` (see the module docstring); ``engine_factory`` builds the engine
    from the :class:`NodeConfig` (default: the node's :func:`~wam_diff2_ros.ros.node.load_engine`).

    Usage problems raise :class:`ReplayUsageError`, an unloadable model :class:`ReplayModelError`; once the
    outputs are opened every ending (damaged bag, failing model, Ctrl-C) writes them and returns a
    :class:`ReplayResult` with the exit code.
    """
    from wam_diff2_ros.bag import BagError, BagReader

    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    wall_start = time.perf_counter()
    plan = RunPlan.of(options)
    if options.rate_hz is not None and not (math.isfinite(options.rate_hz) and options.rate_hz >= 0):
        raise ReplayUsageError("--rate-hz must be >= 0 (0 = plan on each new front image)")
    values, yaml_request = read_params(options)
    try:
        reader = BagReader(options.bag)
    except BagError as exc:
        raise ReplayUsageError(f"cannot open the bag: {exc}") from None
    try:
        request = options.topics.merged(yaml_request)
        names = values.get("cameras.names", ["front"])
        num_cameras = 1 if isinstance(names, str) else max(1, len(names)) if isinstance(names, list) else 1
        topic_map = select_topics(reader.topics, request, num_cameras)
        config_notes: list[str] = []
        config = build_config(options, values, topic_map, config_notes)
        from wam_diff2_ros.ros.autoware import configure_problem

        missing = configure_problem(config)  # a requested Autoware output or input without its messages
        if missing:
            raise ReplayUsageError(missing)
        for note in config_notes:
            log(f"model: {note}")
        if reader.damaged:
            log(f"warning: {reader.damaged}; replaying what can be read")
        for note in topic_map.notes:
            log(f"topics: {note}")
        if options.detect and config.detection_rate_hz <= 0:
            log("detection: --detect with detection.rate_hz 0: detecting at 1 Hz")
        elif not options.detect and config.detection_rate_hz > 0:
            log(f"detection: detection.rate_hz is {config.detection_rate_hz:g}; pass --detect to replay detection too")
        _prepare_out_dir(plan.out, options.overwrite, options.bag)
        if engine_factory is None:
            from wam_diff2_ros.ros.node import load_engine

            engine_factory = load_engine
        log(f"model: loading {config.model_path} (device {config.device}, {config.dtype})")
        loaded = time.perf_counter()
        try:
            engine = engine_factory(config)
        except Exception as exc:
            raise ReplayModelError(
                f"cannot load the model from {config.model_path}: {type(exc).__name__}: {exc}"
            ) from None
        load_s = time.perf_counter() - loaded
        try:
            return _run_replay(plan, reader, config, topic_map, engine, log, wall_start, load_s)
        finally:
            close = getattr(engine, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:
                    log(f"warning: closing the engine failed: {exc}")
    finally:
        reader.close()


def _run_replay(
    plan: RunPlan,
    reader: Any,
    config: Any,
    topic_map: TopicMap,
    engine: Any,
    log: Callable[[str], None],
    wall_start: float,
    load_s: float,
) -> ReplayResult:
    from rclpy.serialization import deserialize_message

    from wam_diff2_ros.bag import BagError, message_class
    from wam_diff2_ros.ros.input_rows import input_table, receive
    from wam_diff2_ros.ros.runtime import PlannerRuntime

    run = Run(log)
    clock = {"now": 0}
    runtime = PlannerRuntime(config, engine, clock=lambda: clock["now"])
    outputs = Outputs(plan, config, runtime, reader, topic_map)
    for problem in outputs.skipped_copies:
        log(f"warning: not copying {problem}")
    if runtime.msgs is None:
        log(f"warning: {runtime.msgs_problem}: no {OUTPUT_TOPICS['trajectory']} in the output bag")

    if plan.serve_port is not None:
        from wam_diff2_ros.replay.serve import open_view

        try:
            run.view = open_view(plan.serve_port, plan.serve_speed, config.viewer_host, config.debug_camera_pose, log)
        except KeyboardInterrupt:
            outputs.close()
            raise
    route = routes(topic_map, input_table(config, runtime))  # the node's input table
    classes = {topic: message_class(reader.topics[topic].msgtype) for topic in topic_map.inputs()}
    unimportable = sorted(t for t, c in classes.items() if c is None)
    if unimportable:
        log(f"warning: cannot import the message types of {unimportable}; those topics are not replayed")
    horizon_ns = round(
        (config.planning.num_waypoints * config.planning.waypoint_dt_s + GROUND_TRUTH_MARGIN_S) * NS_PER_S
    )
    history_ns = 2 * NS_PER_S  # the observation buffer's history: older images cannot matter
    bag_duration = _bag_duration_s(Path(reader.path))
    total_s = plan.duration_s
    if total_s is None and bag_duration is not None:
        total_s = max(0.0, bag_duration - plan.start_s)
    progress = Progress(total_s, plan.progress, sys.stderr)
    detect_rate = (config.detection_rate_hz or 1.0) if plan.detect else 0.0
    schedule: InstantSchedule | None = None
    window_start = 0
    window_end: int | None = None
    planning_done = False
    tail_end = 0

    def run_instants(before_ns: int) -> bool:
        """Run the instants due before ``before_ns``; False once planning is over."""
        assert schedule is not None
        for t_ns, kind in schedule.due(before_ns):
            if window_end is not None and t_ns > window_end:
                return False
            if kind == "plan":
                _plan_instant(run, runtime, outputs, t_ns, clock)
                if run.fatal or (plan.max_plans is not None and len(run.records) >= plan.max_plans):
                    return False
            else:
                _detect_instant(run, runtime, outputs, t_ns, clock)
        return True

    try:
        try:
            for topic, _, stamp_ns, data in reader.raw_messages(set(topic_map.inputs()) | outputs.copied):
                INTERRUPTS.check()
                run.messages_read += 1
                if schedule is None:
                    run.bag_start_ns = stamp_ns
                    window_start = stamp_ns + round(plan.start_s * NS_PER_S)
                    if plan.duration_s is not None:
                        window_end = window_start + round(plan.duration_s * NS_PER_S)
                    schedule = InstantSchedule(window_start, config.rate_hz, detect_rate)
                run.last_stamp_ns = stamp_ns
                if not planning_done:
                    planning_done = not run_instants(stamp_ns) or (window_end is not None and stamp_ns > window_end)
                    tail_end = stamp_ns + horizon_ns  # odometry for the last plans' ground truth
                if planning_done:
                    if stamp_ns > tail_end:
                        break
                    if topic != topic_map.odometry or classes.get(topic) is None:
                        continue
                cls = classes.get(topic)
                row = route.get(topic)
                if cls is None or (row is not None and row.is_image and stamp_ns < window_start - history_ns):
                    continue
                try:
                    msg = deserialize_message(data, cls)
                except Exception as exc:
                    INTERRUPTS.check()  # a signal that landed inside the native deserialiser
                    run.decode_errors += 1
                    run.first_decode_error = run.first_decode_error or f"{topic} at {stamp_ns} ns: {exc}"
                    continue
                if topic == topic_map.odometry:
                    point = _odometry_point(msg)
                    if point is not None:
                        run.odometry.append(point)
                if planning_done:
                    continue
                if topic in outputs.copied and stamp_ns >= window_start:
                    outputs.bag.write(topic, data, stamp_ns)
                clock["now"] = stamp_ns
                problem = receive(row, msg, stamp_ns) if row is not None else None
                run.messages_fed[topic] += 1
                if problem is not None:
                    run.dropped[str(problem)] += 1
                elif row is not None and row.is_image and stamp_ns >= window_start:
                    schedule.image(row.index, stamp_ns)
                progress.update((stamp_ns - window_start) / NS_PER_S, run.num_planned, run.num_valid, run.num_blocked)
        except BagError as exc:
            run.bag_error = str(exc)
        if not planning_done and schedule is not None and run.last_stamp_ns is not None:
            run_instants(run.last_stamp_ns + 1)  # what is due at the last message
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        if progress.latest is not None:
            progress.latest = (progress.latest[0], run.num_planned, run.num_valid, run.num_blocked)
        progress.close()
        outputs.close()
        if run.view is not None:
            run.view.close()
    if run.decode_errors:
        problem = f"{run.decode_errors} message(s) did not deserialise (first: {run.first_decode_error})"
        run.bag_error = f"{run.bag_error} | {problem}" if run.bag_error else f"bag {reader.path}: {problem}"

    if run.interrupted:
        exit_code = EXIT_INTERRUPTED
    elif run.fatal:
        exit_code = EXIT_FAILED
    elif run.bag_error:
        exit_code = EXIT_BAG_DAMAGED
    elif run.num_planned == 0:
        exit_code = EXIT_NO_PLANS
    else:
        exit_code = EXIT_OK
    result = finish(run, plan, reader, config, topic_map, engine, wall_start, load_s, outputs, exit_code)
    result.odometry = run.odometry  # the track the metrics were computed against (the fleet pools it)
    return result


def _plan_instant(run: Run, runtime: Any, outputs: Outputs, t_ns: int, clock: dict[str, int]) -> None:
    clock["now"] = t_ns
    if run.view is not None:
        run.view.pace(t_ns)
    started = time.perf_counter()
    try:
        cycle = runtime.plan(t_ns)
    except Exception as exc:  # the engine failed: the node reports it and keeps going
        wall_ms = (time.perf_counter() - started) * 1000.0
        run.engine_errors += 1
        run.consecutive_errors += 1
        record = error_record(len(run.records), t_ns, run.bag_start_ns or 0, exc, wall_ms)
        with INTERRUPTS.held():
            run.records.append(record)
            outputs.line(outputs.predictions, record)
        run.log(f"error: planning at t={record['t_s']:.2f} s failed: {record['reason']}")
        if run.consecutive_errors >= MAX_CONSECUTIVE_ENGINE_ERRORS:
            run.fatal = f"the model failed {run.consecutive_errors} times in a row (last: {record['reason']})"
        return
    wall_ms = (time.perf_counter() - started) * 1000.0
    if cycle.idle:
        return
    if run.view is not None:
        run.view.submit(cycle, t_ns)
    run.consecutive_errors = 0
    record = plan_record(len(run.records), t_ns, run.bag_start_ns or 0, cycle, wall_ms)
    with INTERRUPTS.held():  # the bag and predictions.jsonl get this instant together or not at all
        if cycle.result is not None:
            run.num_planned += 1
            run.num_valid += int(bool(cycle.result.valid))
            for name, msg in cycle.outputs():  # what the node publishes
                outputs.write_output(name, msg, t_ns)
        run.records.append(record)
        outputs.line(outputs.predictions, record)


def _detect_instant(run: Run, runtime: Any, outputs: Outputs, t_ns: int, clock: dict[str, int]) -> None:
    clock["now"] = t_ns
    started = time.perf_counter()
    try:
        cycle = runtime.detect(t_ns)
    except Exception as exc:
        run.log(f"error: detection at {t_ns} ns failed: {type(exc).__name__}: {exc}")
        return
    wall_ms = (time.perf_counter() - started) * 1000.0
    with INTERRUPTS.held():
        if cycle.result is not None:
            run.detections += 1
            for name, msg in cycle.outputs():  # what the node publishes (detections_2d is not written)
                outputs.write_output(name, msg, t_ns)
        outputs.line(outputs.detections, detection_record(t_ns, run.bag_start_ns or 0, cycle, wall_ms))
