"""`wam-diff2-bench` compares the engines on a tiny model: same tokens, counted host reads, every figure present."""

from __future__ import annotations

import json

import pytest

from wam_diff2_ros.cli import bench
from wam_diff2_ros.core.engine.decoding import DecodeConfig


def test_help_lists_every_subcommand_each_a_module_of_its_name(capsys) -> None:
    import importlib.util

    assert bench.main(["--help"]) == 0
    printed = capsys.readouterr().out
    for name, what in bench.SUBCOMMANDS.items():
        assert f"  {name} " in printed and what in printed
        assert importlib.util.find_spec(f"wam_diff2_ros.bench.{name.replace('-', '_')}") is not None, name
    assert set(bench.FLAG_SUBCOMMANDS.values()) <= set(bench.SUBCOMMANDS)


def test_bench_compares_exact_and_fast_on_the_tiny_model(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--model_id", "tiny", "--device", "cpu", "--dtype", "float32", "--width", "64", "--height", "64"]
    argv += ["--engine", "exact", "--engine", "fast", "--max_new_tokens", "20", "--block_size", "8"]
    argv += ["--warmup", "0", "--iterations", "2", "--json", str(out)]
    assert bench.main(argv) == 0
    figures = json.loads(out.read_text())
    assert figures["tokens_identical"] is True
    assert set(figures["engines"]) == {"exact", "fast"}
    for name, engine in figures["engines"].items():
        assert engine["total_ms"] > 0 and engine["denoise_ms_per_step"] > 0, name
        assert len(engine["steps_per_block"]) >= 1 and engine["ops_per_step"] > 10
        assert engine["host_syncs_per_step"] <= 1.0  # counted: one "anything masked?" read per loop iteration
        assert engine["host_syncs_per_block"] == 1.0
        assert set(engine["stages_ms"]) == {"preprocess", "vision", "prefill", "denoise", "commit", "total"}
    assert figures["engines"]["fast"]["sequences"] == figures["engines"]["exact"]["sequences"]
    assert figures["speedup"] > 0 and figures["max_new_tokens"] == 20
    printed = capsys.readouterr().out
    assert "tokens identical: True" in printed and "host_syncs_per_step" in printed


def test_bench_counts_one_host_read_per_step_on_the_demo_model_with_its_packed_output_rows(tmp_path):
    """The demo model's output layer keeps 84 nonzero rows, which the CPU kernel packs: the counted contract (one
    device->host read per denoising step) holds on that path too, with the exact engine's tokens."""
    from core_helpers import can_build_row_kernel

    from wam_diff2_ros.core.engine.cpu_kernels import kernel_isa

    out = tmp_path / "bench.json"
    argv = ["--model_id", "demo", "--device", "cpu", "--dtype", "float32", "--width", "64", "--height", "64"]
    argv += ["--engine", "exact", "--engine", "fast", "--max_new_tokens", "16", "--block_size", "16"]
    argv += ["--warmup", "0", "--iterations", "1", "--json", str(out)]
    assert bench.main(argv) == 0
    figures = json.loads(out.read_text())
    assert figures["tokens_identical"] is True
    for name, engine in figures["engines"].items():
        assert engine["host_syncs_per_step"] == 1.0, name
    packed = {what: path for what, path in figures["cpu_kernels"]["paths"].items() if "nonzero rows" in what}
    if can_build_row_kernel(kernel_isa()):
        assert packed and all(path.startswith("kernel") for path in packed.values()), packed


def test_bench_decoding_defaults_come_from_decode_config():
    args = bench.build_parser().parse_args([])
    assert args.max_new_tokens is None and args.block_size is None  # filled from DecodeConfig in run()
    assert DecodeConfig().with_overrides(max_new_tokens=args.max_new_tokens).max_new_tokens == 128


def test_gpu_bench_script_runs_its_tiny_cpu_mode(tmp_path):
    """Every step of scripts/bench_gpu.sh on the tiny model (no step time limits there, no compiled variant: the
    mode checks the script's plumbing in seconds; the compiled engine has its own tests)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_gpu.sh"
    env = dict(os.environ, BENCH_GPU_TINY="1", PYTHON=sys.executable, OUT=str(tmp_path), OMP_NUM_THREADS="1")
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=3600)  # a hang
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "tokens identical: True" in done.stdout and "FAILED" not in done.stdout
    figures = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert set(figures["engines"]) == {"exact", "fast"} and figures["tokens_identical"] and figures["speedup"] > 0
    assert set(figures["cpu_kernels"]) == {"loads", "paths"}  # which path each shape ran
    for preprocess in ("host", "device"):  # end to end through the node's runtime, forced and dynamic schedules
        end_to_end = json.loads((tmp_path / f"end_to_end_{preprocess}.json").read_text())
        assert set(end_to_end["schedules"]) == {"12 steps/block", "dynamic"} and end_to_end["preprocess"] == preprocess
    assert json.loads((tmp_path / "preprocessing.json").read_text())["rows"]
    agreement = json.loads((tmp_path / "agreement.json").read_text())
    assert set(agreement["models"]) == {"tiny"} and set(agreement["verdicts"]) == {"fast"}
    assert set(agreement["models"]["tiny"]["engines"]) == {"exact", "fast"}
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile["step_graphs"] == {}  # no CUDA graphs to profile on CPU
    for phases in profile["plan_phases"].values():  # one plan per engine, by decoder phase
        assert {"plan", "prefill", "vision", "step", "commit"} <= set(phases)
        assert phases["plan"]["wall_ms"] > phases["prefill"]["wall_ms"] > phases["vision"]["wall_ms"] > 0
        assert phases["step"]["count"] >= 2 and phases["vision"]["count"] == 1
    assert set(profile["plan_phases"]) == {"fast"} and "one plan by phase" in done.stdout
    rows = json.loads((tmp_path / "rows.json").read_text())  # exact / fast / fused side by side
    assert set(rows) == {"exact", "fast", "fused"} and rows["exact"]["yardstick"] == "reference"
    measured = {name: row for name, row in rows.items() if name != "fused"}  # no fused run in tiny mode
    assert all(row["ms_per_step"] > 0 and row["kernels_per_replay"] is None for row in measured.values())  # no graphs
    assert rows["fast"]["tokens_identical"] is True and rows["fused"]["ms_per_step"] is None
    assert "kernels/replay" in done.stdout
    products = json.loads((tmp_path / "kernels.json").read_text())["products"]
    assert {"q, k, v (3 products) x4 layers", "q/k/v merged x4 layers", "output layer"} <= set(products)
    assert "attention: masked SDPA after repeat_kv x4" in products
    assert set(products.pop("merged products: same bits as separate")) == {"q/k/v", "gate/up"}
    patch_embedding = products.pop("patch embedding: linear vs Conv3d")
    assert patch_embedding["max_abs_diff"] >= 0 and isinstance(patch_embedding["identical"], bool)
    assert {"patch embedding: Conv3d (transformers)", "patch embedding: one linear product"} <= set(products)
    assert all(entry["ms_per_step"] > 0 and entry["read_mb"] > 0 for entry in products.values())


def test_every_measurement_is_a_subcommand(capsys):
    for name in bench.SUBCOMMANDS:
        with pytest.raises(SystemExit) as done:
            bench.main([name, "--help"])
        assert done.value.code == 0 and f"wam-diff2-bench {name}" in capsys.readouterr().out


def test_bench_flags_are_kebab_case_and_old_underscore_spellings_still_parse():
    parser = bench.build_parser()
    new = parser.parse_args(["--model-id", "demo", "--max-new-tokens", "20", "--block-size", "8", "--no-counters"])
    old = parser.parse_args(["--model_id", "demo", "--max_new_tokens", "20", "--block_size", "8", "--no_counters"])
    assert vars(new) == vars(old)
    assert new.model_id == "demo" and new.max_new_tokens == 20 and new.block_size == 8 and new.no_counters
    assert "--max_new_tokens" not in parser.format_help()  # the old spellings are hidden


def test_cpu_step_profile_times_the_parts_and_counts_their_products(tmp_path):
    import os
    import subprocess
    import sys

    from core_helpers import can_build_row_kernel

    from wam_diff2_ros.core.engine.cpu_kernels import kernel_isa

    out = tmp_path / "cpu_step.json"
    argv = ["--model-id", "tiny", "--device", "cpu", "--dtype", "float32", "--width", "64", "--height", "64"]
    argv += ["--max-new-tokens", "16", "--block-size", "8", "--plans", "2", "--json", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "wam_diff2_ros.cli.bench", "profile-cpu-step", *argv]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    steps = figures["steps"]
    assert figures["plans"] == 2 and steps >= 2 and figures["gemm_gflops_per_s"] > 0
    assert figures["output layer"]["calls"] == steps  # the masked rows' logits, once per denoising step
    assert figures["sampling"]["calls"] == figures["remasking selection"]["calls"] == steps
    assert figures["layers"]["calls"] >= steps  # the steps' forwards and the commits'
    # the output layer's products are counted where its kernel ran (the probe's verdict on this CPU's MKL);
    # without it lm_head runs on all rows, uncounted
    output_kernel = [path for shape, path in figures["cpu_kernel_paths"].items() if shape.startswith("output layer")]
    assert bool(output_kernel) == can_build_row_kernel(kernel_isa()), figures["cpu_kernel_paths"]
    kernel = bool(output_kernel) and all(path.startswith("kernel") for path in output_kernel)
    for part in ("layers", "output layer") if kernel else ("layers",):
        assert figures[part]["gflop"] > 0 and figures[part]["gflops_per_s"] > 0 and figures[part]["ms_per_step"] > 0
    assert figures["sampling"]["gflops_per_s"] is None
    assert "of the GEMM rate" in done.stdout
