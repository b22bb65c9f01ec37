"""bench.end_to_end and bench.preprocess: whole plans through the node's runtime, host vs device preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")

from wam_diff2_ros.bench.end_to_end import DYNAMIC, STAGES, forced_steps
from wam_diff2_ros.bench.preprocess import compare
from wam_diff2_ros.cli.bench import main
from wam_diff2_ros.core.engine.decoding import DecodeConfig


def test_forced_steps_use_the_static_schedule_for_whole_blocks() -> None:
    base = DecodeConfig()
    forced = forced_steps(base, 12, 3)
    assert (forced.remasking_strategy, forced.denoising_steps, forced.max_new_tokens) == (
        "low_confidence_static",
        12,
        3 * base.block_size,
    )
    dynamic = forced_steps(base, DYNAMIC, 3)
    assert (dynamic.remasking_strategy, dynamic.denoising_steps) == (base.remasking_strategy, base.denoising_steps)
    with pytest.raises(ValueError, match="steps per block"):
        forced_steps(base, base.block_size + 1, 3)
    with pytest.raises(ValueError, match="blocks"):
        forced_steps(base, 4, 0)


@pytest.mark.slow
def test_end_to_end_times_plans_through_the_runtime(tmp_path, capsys) -> None:
    out = tmp_path / "e2e.json"
    argv = ["--end-to-end", "--model-id", "tiny", "--device", "cpu", "--dtype", "float32", "--width", "96"]
    argv += ["--height", "64", "--plans", "3", "--warmup", "1", "--blocks", "2", "--steps-per-block", "5"]
    argv += ["--steps-per-block", "0", "--preprocess", "device", "--engine", "exact", "--json", str(out)]
    assert main(argv) == 0
    figures = json.loads(out.read_text())
    assert figures["preprocess"] == "device" and figures["plans"] == 3
    forced, dynamic = figures["schedules"]["5 steps/block"], figures["schedules"]["dynamic"]
    # every block the tiny model decodes takes exactly the forced steps (it may stop after one block on EOS)
    assert forced["steps_per_block"] and set(forced["steps_per_block"]) == {5}
    assert len(forced["steps_per_block"]) <= 2 and len(dynamic["steps_per_block"]) <= 2
    for schedule in (forced, dynamic):
        stages = schedule["stages_ms"]
        assert set(STAGES) <= set(stages)
        for stage in STAGES:
            assert stages[stage]["p50"] <= stages[stage]["p95"] <= stages[stage]["p99"]
        assert stages["steps"]["p50"] > 0 and stages["vision"]["p50"] > 0
        assert stages["device_idle"]["mean"] < stages["end_to_end"]["mean"]
        assert schedule["plans"] == 3 and schedule["decode_tokens_per_s"] > 0
    printed = capsys.readouterr().out
    assert "end_to_end" in printed and "tokens/s" in printed and "hardware not stated" in printed


def test_device_preprocessing_matches_host_and_reference() -> None:
    figures = compare(((640, 360),), repeats=1)
    assert {row["content"] for row in figures["rows"]} == {"noise", "gradient", "blocks"}
    for row in figures["rows"]:
        assert row["device_vs_host"] == 0.0
        if row["device_vs_reference"] is not None:
            assert row["device_vs_reference"] <= 1e-6  # transformers rescales, then normalises: float rounding
    assert figures["timing"]["host_path_ms"] > 0 and figures["timing"]["frame_copy_ms"] > 0
    assert figures["timing"]["host_pixel_values_ms"] > 0


def test_preprocess_compares_with_another_preprocessing_file() -> None:
    from wam_diff2_ros.core import image_preprocess

    timing = compare(((320, 180),), repeats=1, previous=Path(image_preprocess.__file__))["timing"]
    assert timing["previous_identical"] is True and timing["previous_ms"] > 0
