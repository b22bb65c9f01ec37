"""The node's process: a spin that survives rclpy's wait-set race, the signal-driven shutdown order and the fast
exit (:func:`run_node`, used by :func:`wam_diff2_ros.ros.node.main`).

``make_node()`` is called after ``rclpy.init``; the node it returns needs ``begin_exit()`` (stop publishing,
cancel the running decode) and ``close()`` (release everything) besides the rclpy node methods.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import rclpy
from rclpy.exceptions import InvalidHandle
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.impl import rcutils_logger
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.logging import LoggingSeverity
from rclpy.utilities import remove_ros_args

from .dds import ensure_fastdds_profile

SWITCH_INTERVAL_S = 0.001
# rclpy keys a log call's `once` / `throttle_duration_sec` state by its caller outside rclpy's own files (the list
# is open to additions): ContextLogger's calls count as made where ContextLogger was called.
rcutils_logger._internal_callers.append(os.path.realpath(__file__))


def spin_until_shutdown(executor: Executor, context: Any = None, poll_s: float = 0.5) -> int:
    """``executor.spin()`` that survives rclpy's wait-set race; returns how many times it recovered.

    With a multi-threaded executor, a callback that destroys a subscription (deactivate) while the spinning
    thread builds its wait set can make rclpy raise ``InvalidHandle`` ("destruction was requested") out of
    ``spin()`` (its subscriptions' QoS event handlers are added to the wait set without the guard the other
    entities get), which would end the node. Here the wait set is simply rebuilt on the next turn. An
    ``RCLError`` after the context was shut down (a signal landing while ``spin_once`` builds its wait timer;
    seen once in a full ``test_node_dds`` run as exit code 1) ends the spin like the signal itself.
    """
    recovered = 0
    # Executor.spin()'s own loop condition (the shutdown flag has no public accessor).
    while rclpy.ok(context=context) and not getattr(executor, "_is_shutdown", False):
        try:
            executor.spin_once(timeout_sec=poll_s)
        except InvalidHandle:
            recovered += 1
        except _rclpy.RCLError:
            if rclpy.ok(context=context):
                raise
            break  # SIGINT/SIGTERM shut the context down while spin_once was waiting: a normal stop
    return recovered


class ContextLogger:
    """A node's logger that writes to stderr once the node's context is shut down (SIGINT / SIGTERM): rcl can no
    longer publish those lines to /rosout then and would print "Failed to publish log message to rosout:
    publisher's context is invalid" for each (the last lines of a stopping node: "decode cancelled" ...)."""

    def __init__(self, logger: Any, context: Any) -> None:
        self._logger = logger
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)

    def _log(self, severity: LoggingSeverity, message: str, **kwargs: Any) -> bool:
        if self._context.ok():
            return self._logger.log(message, severity, **kwargs)
        if not self._logger.is_enabled_for(severity):
            return False
        print(f"[{severity.name}] [{time.time():.9f}] [{self._logger.name}]: {message}", file=sys.stderr, flush=True)
        return True

    def debug(self, message: str, **kwargs: Any) -> bool:
        return self._log(LoggingSeverity.DEBUG, message, **kwargs)

    def info(self, message: str, **kwargs: Any) -> bool:
        return self._log(LoggingSeverity.INFO, message, **kwargs)

    def warning(self, message: str, **kwargs: Any) -> bool:
        return self._log(LoggingSeverity.WARN, message, **kwargs)

    warn = warning

    def error(self, message: str, **kwargs: Any) -> bool:
        return self._log(LoggingSeverity.ERROR, message, **kwargs)

    def fatal(self, message: str, **kwargs: Any) -> bool:
        return self._log(LoggingSeverity.FATAL, message, **kwargs)


def run_node(make_node: Callable[[], Any], argv: Sequence[str] | None = None, exit_process: bool = True) -> int:
    """Run the node ``make_node()`` builds until SIGINT/SIGTERM (the ``wam_diff2_node`` process).

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
    node = make_node()
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
