"""Every console script speaks through the CLI toolkit (``cli/toolkit.py``): a usage error is one line,
``<prog>: error: <message> (see <prog> --help)``, exit 2; its argument checks name the flag and the value."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import wam_diff2_ros.cli
from wam_diff2_ros.cli import toolkit

pytestmark = pytest.mark.core

SCRIPTS = sorted(m.name for m in pkgutil.iter_modules(wam_diff2_ros.cli.__path__) if m.name != "toolkit")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_usage_error_is_one_line_and_exit_2(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    if name == "egodriver":  # its extra (carla-driver-interface) is not in the core run's environment
        pytest.importorskip("carla_driver_interface", reason="the egodriver extra is not installed")
    try:
        main = importlib.import_module(f"wam_diff2_ros.cli.{name}").main
    except ModuleNotFoundError as exc:  # the core run (transformers 4.57.3) has no ROS: the ROS tools are not tried
        if (exc.name or "").split(".")[0] in ("rclpy", "rosbags") or (exc.name or "").endswith("_msgs"):
            pytest.skip(f"wam-diff2 {name} needs ROS ({exc.name}) and this environment has none")
        raise
    try:
        code = main(["--no-such-flag"])
    except SystemExit as exc:
        code = exc.code
    assert code == toolkit.EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert re.fullmatch(r"(wam-diff2-[a-z-]+): error: .+ \(see \1 --help\)", line), line


def test_argument_checks_name_the_flag_and_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    from wam_diff2_ros.cli import bench

    assert bench.main(["--iterations", "0", "--batch", "0"]) == toolkit.EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "wam-diff2-bench: error: --iterations must be >= 1, got 0",
        "wam-diff2-bench: error: --batch must be >= 1, got 0",
    ]
