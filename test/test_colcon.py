"""The colcon route on the pip-installed ROS 2 wheels: ``scripts/colcon_build.sh`` builds the package into a
temporary workspace, ``colcon test`` runs the registered pytest suite (one test of it here), and the installed
node (``source install/setup.bash`` then ``install/wam_diff2_ros/lib/wam_diff2_ros/wam_diff2_node``, as the
docs/node.md says) comes up active over DDS running the workspace's copy of the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from core_helpers import tiny_checkpoint, wait_until
from node_helpers import REPO_ROOT, Harness, NodeProcess, write_params

pytestmark = [pytest.mark.ros, pytest.mark.slow]
SCRIPT = REPO_ROOT / "scripts" / "colcon_build.sh"


def test_colcon_build_and_the_installed_node(tmp_path: Path) -> None:
    venv = Path(sys.prefix)
    if not (venv / "bin" / "wam-diff2-build-interfaces").is_file() or shutil.which("cmake") is None:
        pytest.skip("needs the pip route's venv (wam-diff2-build-interfaces) and cmake")
    workspace = tmp_path / "ws"
    env = {k: v for k, v in os.environ.items() if k not in ("AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH")}
    env["VENV"] = str(venv)
    build = subprocess.run(
        ["bash", str(SCRIPT), "-w", str(workspace), "--event-handlers", "console_direct-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    install = workspace / "install" / "wam_diff2_ros"
    launcher = install / "lib" / "wam_diff2_ros" / "wam_diff2_node"
    assert os.access(launcher, os.X_OK)
    assert (install / "share" / "wam_diff2_ros" / "launch" / "wam_diff2.launch.py").is_file()
    installed_package = next((install / "lib").glob("python3*/site-packages/wam_diff2_ros"))
    assert (installed_package / "msg" / "_planned_trajectory.py").is_file()  # generated, merged with our code

    # `colcon test` runs the pytest suite CMakeLists.txt registers (here one test of it, picked with -k).
    colcon_test = (
        f"source {workspace}/install/setup.bash && {venv}/bin/colcon test --base-paths build/_source "
        "--packages-select wam_diff2_ros --event-handlers console_direct- && "
        f"{venv}/bin/colcon test-result --test-result-base build/wam_diff2_ros --all"
    )
    tested = subprocess.run(
        ["bash", "-c", colcon_test],
        cwd=workspace,
        capture_output=True,
        text=True,
        env={**env, "PYTEST_ADDOPTS": "-k test_the_table_covers_every_supported_encoding -p no:cacheprovider"},
        timeout=600,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-4000:]
    assert "wam_diff2_ros_pytest.xunit.xml: 1 test, 0 errors, 0 failures" in tested.stdout, tested.stdout

    params = write_params(
        tmp_path / "params.yaml",
        {"model.path": str(tiny_checkpoint()), "model.device": "cpu", "model.dtype": "float32"},
    )
    config = install / "share" / "wam_diff2_ros" / "config" / "wam_diff2.yaml"
    shell = (
        f"cd {tmp_path} && source {workspace}/install/setup.bash && "
        f"{sys.executable} -c \"import wam_diff2_ros; print('package:', wam_diff2_ros.__file__)\" && "
        f"exec {launcher} --ros-args --params-file {config} --params-file {params} -r __ns:=/colcon_test"
    )
    harness = Harness("colcon_test_client")
    process = NodeProcess(["bash", "-c", shell], tmp_path / "node.log", env={"AMENT_PREFIX_PATH": None})
    try:
        active = wait_until(
            lambda: harness.lifecycle_state("/colcon_test/wam_diff2", timeout=1.0) == "active" or not process.alive(),
            timeout=120,
        )
        assert active and process.alive(), process.output()
        assert f"package: {installed_package}/__init__.py" in process.output()
    finally:
        code = process.stop()
        harness.close()
    assert code == 0, process.output()
