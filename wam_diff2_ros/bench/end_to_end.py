"""The end-to-end benchmark (`wam-diff2-bench --end-to-end`): a camera message in memory to the Path ready to publish.

Each plan goes through the node's own runtime (`ros.runtime.PlannerRuntime`, built from the node's parameters):
odometry and a command message are handed in first (untimed, as they arrive continuously), then the clock
starts, the `sensor_msgs/Image` is handed to `on_image` and `plan` is called; the clock stops when the
`PlanCycle` holds the `nav_msgs/Path`. Nothing runs beside the node's path: the engine is the node's
(`ros.node.load_engine`), only observed (each `generate` call's start and end, each decoding phase).

Per plan it records the end-to-end time and its split: `before model` (message conversion, observation,
prompt), `preprocess`, `vision`, `prefill`, `steps` (the denoising forwards), `commits`, `decode glue` (the
decoder's bookkeeping between its stages), `engine glue` (chat, tokens → text) and `parse + outputs`
(waypoints, kinematic gate, Path / trajectories / markers); `device idle` is the time no model stage runs
(on the CPU the host-side gaps; on CUDA also the span of CUDA events from the first to the last decoding
phase). Decode tokens per second: response positions decoded (blocks run × block size) per second of steps
and commits.

`steps_per_block`: a trained model unmasks several tokens per step (the demo model: 13 of 32 steps per block),
random weights almost never pass the confidence threshold and take all 32. `forced_steps` makes every block
take exactly N steps with the reference's own static schedule (`low_confidence_static`: an even share of the
block per step), so random weights do a trained model's work; 0 keeps the configured dynamic schedule.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wam_diff2_ros.bench.runs import ModelSettings
from wam_diff2_ros.core.device_preprocess import DEFAULT_PREPROCESS
from wam_diff2_ros.core.engine.decoding import DecodeConfig

DYNAMIC = 0  # steps_per_block value: the configured (dynamic) schedule
STAGES = (
    "end_to_end",
    "before_model",
    "preprocess",
    "vision",
    "prefill",
    "steps",
    "commits",
    "decode_glue",
    "engine_glue",
    "parse_outputs",
    "device_idle",
)
PAPER_TOKENS_PER_S = 673.0  # the reference paper's decode rate (FlashInfer + CUDA graphs; hardware not stated)


@dataclass(frozen=True)
class EndToEndSettings(ModelSettings):
    """What the end-to-end benchmark runs (the CLI's flags)."""

    engine: str = "auto"
    no_cuda_graphs: bool = False
    preprocess: str = DEFAULT_PREPROCESS
    steps_per_block: tuple[int, ...] = (DYNAMIC,)
    blocks: int = 3
    plans: int = 200
    warmup: int = 3
    frames: int = 4  # distinct camera frames, cycled


def forced_steps(base: DecodeConfig, steps_per_block: int, blocks: int) -> DecodeConfig:
    """`base` decoding `blocks` blocks, each in exactly `steps_per_block` steps (the static schedule unmasks
    an even share per step; DYNAMIC keeps `base`'s schedule and step limit)."""
    if blocks < 1:
        raise ValueError(f"blocks must be >= 1, got {blocks}")
    config = base.with_overrides(max_new_tokens=blocks * base.block_size)
    if steps_per_block == DYNAMIC:
        return config
    if not 1 <= steps_per_block <= base.block_size:
        raise ValueError(f"steps per block must be in 1..{base.block_size} (the block size), got {steps_per_block}")
    return config.with_overrides(remasking_strategy="low_confidence_static", denoising_steps=steps_per_block)


class _TimedEngine:
    """The node's engine with each `generate` call's start and end recorded (everything else delegated)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.started = self.ended = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.started = time.perf_counter()
        try:
            return self.engine.generate(*args, **kwargs)
        finally:
            self.ended = time.perf_counter()


class _PhaseEvents:
    """CUDA events at the decoder's phase marks (the device's progress); nothing on other devices."""

    def __init__(self, device: Any) -> None:
        import torch

        self.cuda = device.type == "cuda"
        self._torch = torch
        self.events: list[Any] = []

    def __call__(self, phase: str) -> None:
        if self.cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)

    def span_ms(self) -> float | None:
        """Device time from the first to the last mark of the last plan (None off CUDA)."""
        if not self.cuda or len(self.events) < 2:
            return None
        self.events[-1].synchronize()
        return float(self.events[0].elapsed_time(self.events[-1]))


def _node_config(settings: EndToEndSettings, decode: DecodeConfig) -> Any:
    from wam_diff2_ros.ros.params import NodeConfig

    return NodeConfig.from_parameters(
        {
            "model.path": "tiny" if settings.random_2b else settings.model_id,
            "model.device": settings.device,
            "model.dtype": settings.dtype,
            "model.preprocess": settings.preprocess,
            "decoding.engine": decode.engine,
            "decoding.cuda_graphs": decode.cuda_graphs,
            "decoding.max_new_tokens": decode.max_new_tokens,
            "decoding.denoising_steps": decode.denoising_steps,
            "decoding.remasking_strategy": decode.remasking_strategy,
            "planning.rate_hz": 0.0,
            # measured, not applied: a slow CPU plan must still produce its Path (stale plans are counted)
            "planning.max_plan_age_s": 3600.0,
        }
    )


def load_node_engine(settings: EndToEndSettings, config: Any) -> Any:
    """The node's engine for `config` (`ros.node.load_engine`); `random_2b` swaps in random 2B weights."""
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.ros.node import load_engine

    if not settings.random_2b:
        return load_engine(config)
    from .runs import BenchSettings
    from .runs import load_engine as load_bench_engine

    engine = load_bench_engine(
        BenchSettings(
            random_2b=True,
            text_layers=settings.text_layers,
            vision_layers=settings.vision_layers,
            device=settings.device,
            dtype=settings.dtype,
        )
    )
    return Engine(engine.model, engine.processor, engine.checkpoint, engine.device, preprocess=config.preprocess)


class _Feeder:
    """The messages of one plan, built before the clock starts: odometry, acceleration, a command, the image."""

    def __init__(self, settings: EndToEndSettings) -> None:
        rng = np.random.default_rng(0)
        shape = (settings.height, settings.width, 3)
        self.frames = [rng.integers(0, 256, shape, dtype=np.uint8).tobytes() for _ in range(settings.frames)]
        self.width, self.height = settings.width, settings.height
        self.count = 0

    def messages(self, stamp_ns: int) -> tuple[Any, Any, Any, Any]:
        from geometry_msgs.msg import AccelWithCovarianceStamped
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import Image
        from std_msgs.msg import String

        from wam_diff2_ros.ros.conversions import ns_to_stamp

        odometry = Odometry()
        odometry.header.stamp = ns_to_stamp(stamp_ns)
        odometry.header.frame_id = "odom"
        odometry.child_frame_id = "base_link"
        odometry.pose.pose.orientation.w = 1.0
        odometry.twist.twist.linear.x = 6.0 + 0.1 * (self.count % 7)
        acceleration = AccelWithCovarianceStamped()
        acceleration.header.stamp = ns_to_stamp(stamp_ns)
        acceleration.header.frame_id = "base_link"
        acceleration.accel.accel.linear.x = 0.3
        image = Image()
        image.header.stamp = ns_to_stamp(stamp_ns)
        image.header.frame_id = "front_optical"
        image.height, image.width, image.encoding, image.step = self.height, self.width, "rgb8", self.width * 3
        image.data = self.frames[self.count % len(self.frames)]
        self.count += 1
        return odometry, acceleration, String(data="straight"), image


def _plan_once(runtime: Any, timed: _TimedEngine, feeder: _Feeder, clock: Callable[[], int]) -> dict[str, Any]:
    """One plan through the runtime: its stage times (ms), or the reason it gave no Path."""
    stamp = clock()
    odometry, acceleration, command, image = feeder.messages(stamp)
    inputs = (
        runtime.on_odometry(odometry, clock()),
        runtime.on_acceleration(acceleration, clock()),
        runtime.on_command(command, clock()),
    )
    for problem in inputs:
        if problem is not None:
            raise RuntimeError(f"the runtime refused an input: {problem}")
    started = time.perf_counter()
    problem = runtime.on_image(0, image, clock())
    cycle = runtime.plan(clock())
    ended = time.perf_counter()
    if problem is not None or cycle.result is None:
        raise RuntimeError(f"no plan: {problem or [str(p) for p in cycle.problems]}")
    timing = cycle.result.timing
    model = timing.preprocess_ms + timing.vision_ms + timing.prefill_ms + timing.denoise_ms + timing.commit_ms
    end_to_end = (ended - started) * 1000
    generate_ms = (timed.ended - timed.started) * 1000
    return {
        "path": cycle.path is not None,
        "reason": cycle.withheld or cycle.result.reason,
        "blocks": len(cycle.result.steps_per_block),
        "steps_per_block": list(cycle.result.steps_per_block),
        "end_to_end": end_to_end,
        "before_model": (timed.started - started) * 1000,
        "preprocess": timing.preprocess_ms,
        "vision": timing.vision_ms,
        "prefill": timing.prefill_ms,
        "steps": timing.denoise_ms,
        "commits": timing.commit_ms,
        "decode_glue": timing.total_ms - model,
        "engine_glue": generate_ms - timing.total_ms,
        "parse_outputs": (ended - timed.ended) * 1000,
        "device_idle": end_to_end - model,
    }


def _default_age_gate_s() -> float:
    """The node's default `planning.max_plan_age_s`."""
    from wam_diff2_ros.ros.params import SPEC_BY_NAME

    return float(SPEC_BY_NAME["planning.max_plan_age_s"].default)


def _summary(values: Sequence[float]) -> dict[str, float]:
    array = np.asarray(values, dtype=float)
    return {
        "p50": float(np.percentile(array, 50)),
        "p95": float(np.percentile(array, 95)),
        "p99": float(np.percentile(array, 99)),
        "mean": float(array.mean()),
    }


def measure_schedule(
    runtime: Any, timed: _TimedEngine, settings: EndToEndSettings, block_size: int, events: _PhaseEvents
) -> dict[str, Any]:
    """Warm up, then `plans` timed plans through the runtime; their figures."""
    feeder = _Feeder(settings)
    clock = time.monotonic_ns
    for _ in range(settings.warmup):
        _plan_once(runtime, timed, feeder, clock)
    rows, spans = [], []
    for _ in range(settings.plans):
        events.events.clear()
        rows.append(_plan_once(runtime, timed, feeder, clock))
        span = events.span_ms()
        if span is not None:
            spans.append(span)
    figures: dict[str, Any] = {"stages_ms": {stage: _summary([r[stage] for r in rows]) for stage in STAGES}}
    if spans:
        figures["stages_ms"]["device_decode_span"] = _summary(spans)
        outside = [r["end_to_end"] - s for r, s in zip(rows, spans, strict=True)]
        figures["stages_ms"]["outside_device_span"] = _summary(outside)
    positions = sum(r["blocks"] for r in rows) * block_size
    decode_s = sum(r["steps"] + r["commits"] for r in rows) / 1000
    figures["plans"] = len(rows)
    figures["paths"] = sum(r["path"] for r in rows)
    figures["withheld"] = sorted({r["reason"] for r in rows if not r["path"]})
    figures["stale_at_default_gate"] = sum(r["end_to_end"] > _default_age_gate_s() * 1000 for r in rows)
    figures["steps_per_block"] = rows[0]["steps_per_block"]
    figures["steps_per_block_mean"] = statistics.fmean(s for r in rows for s in r["steps_per_block"])
    figures["decode_tokens_per_s"] = positions / decode_s if decode_s > 0 else float("nan")
    figures["tokens_per_s_end_to_end"] = positions / (sum(r["end_to_end"] for r in rows) / 1000)
    return figures


def run_end_to_end(settings: EndToEndSettings) -> dict[str, Any]:
    """Measure each requested steps-per-block schedule through one runtime; the figures."""
    import torch

    from wam_diff2_ros.ros.runtime import PlannerRuntime

    if settings.plans < 1 or settings.warmup < 0 or settings.frames < 1:
        raise ValueError("need plans >= 1, warmup >= 0, frames >= 1")
    base = DecodeConfig().with_overrides(engine=settings.engine, cuda_graphs=False if settings.no_cuda_graphs else None)
    decodes = {n: forced_steps(base, n, settings.blocks) for n in settings.steps_per_block}
    config = _node_config(settings, next(iter(decodes.values())))
    engine = load_node_engine(settings, config)
    events = _PhaseEvents(engine.device)
    engine.phase_observer = events
    timed = _TimedEngine(engine)
    runtime = PlannerRuntime(config, timed, clock=time.monotonic_ns)
    model = engine.name if not settings.random_2b else "random-2b"
    figures: dict[str, Any] = {
        "model": model,
        "device": str(engine.device),
        "dtype": str(engine.dtype).removeprefix("torch."),
        "engine": engine.describe_decoding(base),
        "preprocess": engine.preprocess,
        "image": f"{settings.width}x{settings.height} rgb8",
        "blocks": settings.blocks,
        "plans": settings.plans,
        "torch_threads": torch.get_num_threads(),
        "schedules": {},
    }
    for steps, decode in decodes.items():
        runtime.apply_config(_with_decode(config, decode))
        name = "dynamic" if steps == DYNAMIC else f"{steps} steps/block"
        figures["schedules"][name] = measure_schedule(runtime, timed, settings, decode.block_size, events)
    return figures


def _with_decode(config: Any, decode: DecodeConfig) -> Any:
    from dataclasses import replace

    return replace(config, decode=decode, planning=replace(config.planning, decode=decode))


def print_end_to_end(figures: dict[str, Any]) -> None:
    """The table: one row per stage, p50 / p95 / p99 (ms) per schedule."""
    print(
        f"end to end: model {figures['model']} on {figures['device']} ({figures['dtype']}, "
        f"{figures['torch_threads']} threads), engine {figures['engine']}, preprocess {figures['preprocess']}, "
        f"image {figures['image']}, {figures['blocks']} blocks, {figures['plans']} plans"
    )
    names = list(figures["schedules"])
    header = "".join(f"{name + ' p50':>20}{'p95':>10}{'p99':>10}" for name in names)
    print(f"{'ms':<22}{header}")
    stages = list(figures["schedules"][names[0]]["stages_ms"])
    for stage in stages:
        cells = ""
        for name in names:
            row = figures["schedules"][name]["stages_ms"].get(stage)
            cells += "".join(f"{row[q]:>20.2f}" if q == "p50" else f"{row[q]:>10.2f}" for q in ("p50", "p95", "p99"))
        print(f"{stage:<22}{cells}")
    for name in names:
        entry = figures["schedules"][name]
        print(
            f"{name}: steps per block {entry['steps_per_block']} (mean {entry['steps_per_block_mean']:.1f}), "
            f"decode {entry['decode_tokens_per_s']:.0f} tokens/s (paper: {PAPER_TOKENS_PER_S:.0f}, hardware not "
            f"stated), {entry['paths']}/{entry['plans']} Paths, {entry['stale_at_default_gate']} over the default "
            f"{_default_age_gate_s():g} s age gate" + (f"; withheld: {entry['withheld']}" if entry["withheld"] else "")
        )


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's flags (`wam-diff2-bench`'s, plus the end-to-end group)."""
    from wam_diff2_ros.bench.flags import build_parser as bench_parser
    from wam_diff2_ros.core.device_preprocess import PREPROCESS_MODES

    parser = bench_parser(prog="wam-diff2-bench end-to-end", description=__doc__.split("\n\n")[0])
    defaults = EndToEndSettings()
    end = parser.add_argument_group("end to end (through the node's runtime: Image message in, Path out)")
    end.add_argument("--plans", type=int, default=defaults.plans, help="timed plans per schedule")
    end.add_argument(
        "--steps-per-block",
        type=int,
        action="append",
        default=None,
        help="force exactly N denoising steps per block (the static schedule); 0 = the dynamic default; repeat "
        "to measure several schedules in one run",
    )
    end.add_argument("--blocks", type=int, default=defaults.blocks, help="response blocks per plan")
    end.add_argument("--preprocess", choices=PREPROCESS_MODES, default=defaults.preprocess, help="model.preprocess")
    return parser


def settings_from_args(args: argparse.Namespace) -> EndToEndSettings:
    """The settings from parsed flags (the first --engine: one engine, the node's)."""
    engine = (args.engine or ["auto"])[0]
    model = {f.name: getattr(args, f.name) for f in dataclasses.fields(ModelSettings)}
    return EndToEndSettings(
        **model,
        engine=engine,
        no_cuda_graphs=args.no_cuda_graphs,
        preprocess=args.preprocess,
        steps_per_block=tuple(args.steps_per_block or EndToEndSettings().steps_per_block),
        blocks=args.blocks,
        plans=args.plans,
        warmup=args.warmup,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`wam-diff2-bench end-to-end` (also `wam-diff2-bench --end-to-end`); returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.plans < 1 or args.warmup < 0 or args.blocks < 1:
        print("wam-diff2-bench end-to-end: error: need --plans >= 1, --warmup >= 0, --blocks >= 1", file=sys.stderr)
        return 2
    try:
        figures = run_end_to_end(settings_from_args(args))
    except Exception as exc:
        print(f"wam-diff2-bench end-to-end: error: {exc}", file=sys.stderr)
        return 1
    print_end_to_end(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0
