"""The agreement yardstick (`wam-diff2-bench agreement`): its admission rule, and a run on the demo model on CPU."""

from __future__ import annotations

import json

import pytest

from wam_diff2_ros.bench import agreement
from wam_diff2_ros.cli import bench

pytestmark = pytest.mark.core


def summary(median, p95, valid=1.0, differing=0.05):
    return {
        "distance_m": {"median": median, "p95": p95, "max": p95},
        "valid_rate": valid,
        "differing_tokens": differing,
    }


def test_an_engine_is_admitted_only_within_ten_percent_of_exact_bf16():
    reference = summary(0.20, 0.50)
    assert agreement.verdict(summary(0.21, 0.54), reference) == []  # within 10 %
    assert agreement.verdict(summary(0.23, 0.50), reference) == ["median distance 0.23 m > 0.2200 m"]
    assert len(agreement.verdict(summary(0.20, 0.60), reference)) == 1  # p95 too far
    assert agreement.verdict(summary(0.20, 0.50, valid=0.9), reference)[0].startswith("valid rate 0.900")
    assert agreement.verdict(summary(0.20, 0.50, differing=0.08), reference)[0].startswith("differing tokens")
    assert agreement.verdict(summary(0.005, 0.009), summary(0.0, 0.0)) == []  # within the 1 cm floor
    assert agreement.verdict(summary(None, None), summary(None, None)) == []  # no plans either way (random weights)


def test_prompts_vary_size_command_and_speed():
    prompts = agreement.planning_prompts(48)
    assert {p["command"] for p in prompts} == set(agreement.COMMANDS)
    assert len({p["size"] for p in prompts}) == len(agreement.SIZES)
    speeds = [p["velocity"][0] for p in prompts]
    assert min(speeds) == 0.0 and max(speeds) == agreement.MAX_SPEED
    assert agreement.planning_prompts(48) == prompts  # seeded


@pytest.mark.slow
def test_yardstick_runs_on_the_demo_model(tmp_path, capsys):
    """CPU: exact in bfloat16 and the fast engine in bfloat16 against exact in float32, two prompts."""
    out = tmp_path / "agreement.json"
    argv = ["agreement", "--model", "demo", "--device", "cpu", "--prompts", "2", "--size", "128x72"]
    assert bench.main([*argv, "--candidate", "fast", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["dtype"] == "bfloat16" and report["prompts"] == 2
    engines = report["models"]["demo"]["engines"]
    assert set(engines) == {"exact", "fast"}
    for figures in engines.values():
        assert 0 <= figures["identical"] <= 1 and 0 <= figures["valid_rate"] <= 1
        assert 0 <= figures["differing_tokens"] <= 1 and figures["compared_plans"] <= 2
    assert set(report["verdicts"]) == {"fast"} and isinstance(report["verdicts"]["fast"]["admitted"], bool)
    assert report["verdicts"]["fast"]["admitted"] == (engines["fast"]["not_admitted_because"] == [])
    assert "fast: " in capsys.readouterr().out
