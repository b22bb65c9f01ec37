"""A participant killed with SIGKILL leaves its Fast DDS shared-memory segment (64 MB with the package's profile)
in /dev/shm; the test session removes such segments when it ends. Real rclpy participants in child processes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from core_helpers import wait_until
from process_helpers import SHM_DIR, fastdds_segments, remove_stale_fastdds_segments, stop_process, subprocess_env

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
pytestmark = pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm")

PARTICIPANT = (
    "import rclpy, time; rclpy.init(); node = rclpy.create_node('shm_probe'); print('up', flush=True); time.sleep(60)"
)


def start_participant() -> tuple[subprocess.Popen, set[str]]:
    """A child with one live participant, and the data segments it created."""
    before = fastdds_segments()
    child = subprocess.Popen(
        [sys.executable, "-c", PARTICIPANT], env=subprocess_env(), stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    assert wait_until(lambda: fastdds_segments() - before, timeout=10.0)
    return child, fastdds_segments() - before


def test_segment_of_a_killed_participant_is_removed_and_a_live_one_kept() -> None:
    live, live_segments = start_participant()
    killed, killed_segments = start_participant()
    try:
        killed.kill()
        killed.wait(10)
        if not killed_segments & fastdds_segments():
            pytest.skip("this Fast DDS removes a killed participant's segment itself")
        others = fastdds_segments() - live_segments - killed_segments
        removed = remove_stale_fastdds_segments(keep=others | live_segments, min_age_s=0.0)
        assert set(removed) == killed_segments
        assert not killed_segments & fastdds_segments()
        assert not any((SHM_DIR / f"{name}_el").exists() for name in killed_segments)
        # A live participant's segment stays, even when it is not in `keep`.
        assert remove_stale_fastdds_segments(keep=others, min_age_s=0.0) == []
        assert live_segments <= fastdds_segments()
    finally:
        stop_process(live, 10.0)
        if killed.poll() is None:
            killed.kill()
    # A participant that closes removes its own segment.
    assert wait_until(lambda: not live_segments & fastdds_segments(), timeout=10.0)


def test_young_segments_are_kept(tmp_path) -> None:
    (tmp_path / "fastdds_0123456789abcdef").write_bytes(b"")
    (tmp_path / "fastdds_0123456789abcdef_el").write_bytes(b"")
    (tmp_path / "fastdds_port7000_el").write_bytes(b"")
    assert fastdds_segments(tmp_path) == {"fastdds_0123456789abcdef"}
    assert remove_stale_fastdds_segments(directory=tmp_path, min_age_s=60.0) == []
    assert remove_stale_fastdds_segments(directory=tmp_path, min_age_s=0.0) == ["fastdds_0123456789abcdef"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fastdds_port7000_el"]
