"""`wam-diff2-bench rows DIR`: exact / fast / fused side by side from one scripts/bench_gpu.sh run's JSON files.

Reads `bench_gpu.json` (ms per denoising step, tokens identical), `profile.json` (a captured step's kernels per
replay, the GPU time of its matrix products and attention, the weights those products read) and
`agreement.json` (the yardstick's verdicts) from DIR, prints one row per engine and writes `rows.json` there.
Effective weight bandwidth = the products' weights / their GPU time per replay; attention µs per layer = the
attention kernels' GPU time per replay / text layers. A figure a file does not hold (no CUDA graph of the exact
engine; no GPU at all in BENCH_GPU_TINY=1 mode) is shown as '-'.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ENGINES = ("exact", "fast", "fused")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def rows(folder: Path) -> dict[str, dict[str, Any]]:
    """Per engine its figures from the run's JSON files (None where a file does not hold one)."""
    bench, profile, agreement = (_load(folder / n) for n in ("bench_gpu.json", "profile.json", "agreement.json"))
    table: dict[str, dict[str, Any]] = {}
    for name in ENGINES:
        measured = bench.get("engines", {}).get(name, {})
        graph = profile.get("step_graphs", {}).get(name, {})
        kinds = graph.get("by_kind", {})
        matmul_ms = kinds.get("matmul", {}).get("gpu_ms")
        attention_ms = kinds.get("attention", {}).get("gpu_ms")
        weight_mb, layers = profile.get("product_weight_mb"), profile.get("text_layers")
        identical = {"exact": True, "fast": bench.get("tokens_identical"), "fused": bench.get("fused_tokens_identical")}
        verdict = agreement.get("verdicts", {}).get(name, {}).get("admitted")
        table[name] = {
            "ms_per_step": measured.get("denoise_ms_per_step"),
            "kernels_per_replay": graph.get("kernels"),
            "weight_gb_per_s": weight_mb / 1024 / (matmul_ms / 1e3) if weight_mb and matmul_ms else None,
            "attention_us_per_layer": attention_ms * 1e3 / layers if attention_ms and layers else None,
            "tokens_identical": identical[name] if measured else None,
            "yardstick": "reference" if name == "exact" else verdict,
        }
    return table


def _cell(value: Any) -> str:
    if value is None:
        return f"{'-':>12}"
    if isinstance(value, bool):
        return f"{'yes' if value else 'no':>12}"
    if isinstance(value, float):
        return f"{value:>12.2f}"
    return f"{value!s:>12}"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rows and write DIR/rows.json; returns the exit code."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench rows", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the OUT folder of a scripts/bench_gpu.sh run")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"wam-diff2-bench rows: error: no folder {args.folder}", file=sys.stderr)
        return 2
    table = rows(args.folder)
    labels = {
        "ms_per_step": "ms / step",
        "kernels_per_replay": "kernels/replay",
        "weight_gb_per_s": "weights GB/s",
        "attention_us_per_layer": "attn µs/layer",
        "tokens_identical": "same tokens",
        "yardstick": "admitted",
    }
    print(f"{'':<16}" + "".join(f"{name:>12}" for name in table))
    for key, label in labels.items():
        print(f"{label:<16}" + "".join(_cell(table[name][key]) for name in table))
    (args.folder / "rows.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    return 0
