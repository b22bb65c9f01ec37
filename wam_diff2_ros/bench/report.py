"""Printing the figures of a benchmark run as a table, one column per engine."""

from __future__ import annotations

from typing import Any

from wam_diff2_ros.core.tables import text_row


def print_figures(figures: dict[str, Any]) -> None:
    """Human-readable table, one column per engine."""
    print(
        f"model {figures['model']} on {figures['device']} ({figures['dtype']}, {figures['torch_threads']} threads), "
        f"image {figures['image']}, batch {figures['batch']}, prompt {figures['prompt_tokens']} tokens "
        f"({figures['image_tokens']} image), max_new_tokens {figures['max_new_tokens']}"
    )
    names = list(figures["engines"])
    print(text_row("p50 ms", names))
    for stage in figures["engines"][names[0]]["stages_ms"]:
        print(text_row(stage, [figures["engines"][n]["stages_ms"][stage]["p50"] for n in names]))
    for key in (
        "denoise_ms_per_step",
        "steps_per_block_mean",
        "host_syncs_per_step",
        "host_syncs_per_block",
        "ops_per_step",
        "peak_memory_mb",
    ):
        if key in figures["engines"][names[0]]:
            print(text_row(key, [figures["engines"][n].get(key) for n in names]))
    print("steps per block: " + "; ".join(f"{n} {figures['engines'][n]['steps_per_block']}" for n in names))
    line = f"tokens identical: {figures['tokens_identical']}"
    if "speedup" in figures:
        line += f", speedup (total p50) {figures['speedup']:.2f}x, denoise per step {figures['denoise_speedup']:.2f}x"
    print(line)
    if "fused_tokens_identical" in figures:
        line = f"fused: tokens identical {figures['fused_tokens_identical']}"
        if "fused_speedup" in figures:
            line += (
                f", speedup (total p50) {figures['fused_speedup']:.2f}x,"
                f" denoise per step {figures['fused_denoise_speedup']:.2f}x"
            )
        print(line)
    kernels = figures.get("cpu_kernels") or {}
    for isa, how in kernels.get("loads", {}).items():
        print(f"CPU kernels {isa}: {how}")
    for shape, path in kernels.get("paths", {}).items():
        print(f"  {shape}: {path}")
