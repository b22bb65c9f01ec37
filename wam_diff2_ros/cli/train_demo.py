"""``wam-diff2-train-demo``: train the demo model (:mod:`wam_diff2_ros.demo.train`) and write its files."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wam_diff2_ros.cli import toolkit
from wam_diff2_ros.demo import expand as demo_files
from wam_diff2_ros.demo.train.config import DRIVE_IMAGE_SIZES, DRIVE_SAMPLE_SEEDS, TRAIN_DRIVE_SEEDS, ModelSizes
from wam_diff2_ros.demo.train.loop import FINAL_EVALS, TrainSettings, log, train

PROG = "wam-diff2-train-demo"


def print_report(metrics: dict[str, Any]) -> None:
    """Print the measured quality (what README quotes)."""
    q = metrics["held_out"]
    if q is None:  # --final-eval validation
        print_held_out(metrics)
        log(f"training {metrics['training_wall_s']:.0f} s, total {metrics['total_wall_s']:.0f} s")
        return
    log("held-out quality (real decoder, block 32, dynamic 0.9, 32 steps, CPU float32):")
    log(f"  valid-answer rate {q['valid_rate']:.3f} on {q['samples']} samples")
    log(
        f"  ADE {q['ade_m']:.2f} m, FDE {q['fde_m']:.2f} m (median ADE {q['median_ade_m']:.2f} m)"
        if q["ade_m"] is not None
        else "  no valid answers"
    )
    log(f"  mean steps per block {q['mean_steps_per_block']:.2f}, blocks {q['mean_blocks']:.2f}")
    log(
        f"  latency mean {q['latency_mean_s']:.3f} s, p50 {q['latency_p50_s']:.3f} s, "
        f"p90 {q['latency_p90_s']:.3f} s ({q['prompt_tokens']} prompt tokens)"
    )
    for b in q["path_length_by_speed"]:
        if not b["count"]:
            continue
        log(
            f"  speed {b['speed_m_s'][0]:.0f}-{b['speed_m_s'][1]:.0f} m/s: median path {b['median_length_m']:.2f} m "
            f"(truth {b['median_gt_length_m']:.2f} m, n={b['count']})"
        )
    for command, entry in q["final_y_by_command"].items():
        if not entry["count"]:
            continue
        log(
            f"  {command}: mean final y {entry['mean_final_y_m']:.2f} m "
            f"(truth {entry['mean_gt_final_y_m']:.2f} m, n={entry['count']})"
        )
    log(f"  checks: {q['checks']}")
    d = metrics["held_out_drives"]
    log(
        f"held-out drives {d['drives']} ({d['samples']} instants): plausible (passes the kinematic gate) "
        f"{d['plausible_rate']:.3f}, valid format {d['valid_rate']:.3f}"
        + (f", ADE {d['ade_m']:.2f} m, FDE {d['fde_m']:.2f} m" if d["ade_m"] is not None else "")
    )
    print_held_out(metrics)
    log(f"  sweeps: {metrics['sweeps']}")
    log(
        f"training {metrics['training_wall_s']:.0f} s, total {metrics['total_wall_s']:.0f} s; "
        f"shipped {metrics['model']['shipped_bytes'] / 1e6:.2f} MB"
    )


def print_held_out(metrics: dict[str, Any]) -> None:
    """The gate's pass rate and ADE per speed band on the validation and test drives, and the confidence ranking."""
    for key in ("validation_speeds", "test_speeds", "held_out_drives"):
        if key not in metrics:
            continue
        entry = metrics[key]
        ranking = entry.get("confidence") or {}
        log(
            f"{key} (drives {entry['drives'][0]}-{entry['drives'][-1]}, {entry['samples']} instants): "
            f"plausible {entry['plausible_rate']:.3f}, confidence AUC passed/rejected "
            f"{ranking.get('auc_passed_vs_rejected')}, Spearman vs ADE {ranking.get('spearman_vs_ade')}"
        )
        for band in entry["by_speed_band"]:
            ade = "-" if band["ade_m"] is None else f"{band['ade_m']:.2f} m"
            rate = "-" if band["plausible_rate"] is None else f"{band['plausible_rate']:.2f}"
            log(f"  {band['speed_m_s']} m/s: {band['plans']} plans, plausible {rate}, ADE {ade}")


def judge_only(folder: Path | None, out: Path, threads: int, parser: argparse.ArgumentParser) -> int:
    """``--judge``: the held-out metrics of the demo files in `folder`, into ``out/judgement.json``."""
    import json
    import tempfile

    import torch

    from wam_diff2_ros.demo.train.held_out import judge_folder

    if folder is None:
        parser.error("--judge needs --init-from (the demo files to judge)")
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="wam_diff2_judge_") as tmp:
        metrics = judge_folder(folder, Path(tmp))
    out.mkdir(parents=True, exist_ok=True)
    (out / "judgement.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    print_held_out(metrics)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``wam-diff2-train-demo [--out DIR] [--epochs N] ...``: train the demo model and write its files."""
    defaults = TrainSettings()
    parser = toolkit.Parser(
        prog=PROG,
        description="Train the embedded demo model: a tiny WAM-Diff2 with masked block diffusion.",
    )
    parser.add_argument(
        "--out", type=Path, default=demo_files.DEMO_DIR, help="output folder (default: the package's demo/weights/)"
    )
    parser.add_argument("--train-samples", type=int, default=defaults.train_samples)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument(
        "--noisy-copies", type=int, default=defaults.noisy_copies, help="noisy response copies per sequence"
    )
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--warmup-steps", type=int, default=defaults.warmup_steps, help="linear learning-rate warm-up")
    parser.add_argument("--eval-samples", type=int, default=defaults.eval_samples)
    parser.add_argument(
        "--frames-per-kind", type=int, default=defaults.frames_per_kind, help="turn / straight frames per drive"
    )
    parser.add_argument(
        "--train-drives",
        type=int,
        default=defaults.train_drives,
        help=f"drives rendered for training (<= {len(TRAIN_DRIVE_SEEDS)})",
    )
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--probe-every", type=int, default=defaults.probe_every, help="steps between decoder probes")
    parser.add_argument(
        "--drive-frames",
        type=int,
        default=defaults.drive_frames,
        help="instants per simulated drive taken as training samples, each also mirrored (0: none)",
    )
    parser.add_argument(
        "--sample-drives",
        type=int,
        default=defaults.sample_drives,
        help=f"simulated drives the --drive-frames come from (<= {len(DRIVE_SAMPLE_SEEDS)})",
    )
    parser.add_argument(
        "--drive-sizes",
        choices=tuple(DRIVE_IMAGE_SIZES),
        default=defaults.drive_sizes,
        help="frame sizes of the drive instants: 'mixed' (8 sizes and aspect ratios) or 'camera' (mostly 16:9 "
        "frames of the sample bag's image grid, some others)",
    )
    parser.add_argument(
        "--speed-frames",
        type=int,
        default=defaults.speed_frames,
        help="instants per drive's road at any speed and pose (0-16 m/s, some off the lane centre), each also "
        "mirrored (0: none)",
    )
    parser.add_argument(
        "--speed-drives",
        type=int,
        default=defaults.speed_drives,
        help=f"simulated drives the --speed-frames come from (<= {len(DRIVE_SAMPLE_SEEDS)})",
    )
    parser.add_argument(
        "--speed-blind-lateral",
        type=float,
        default=defaults.speed_blind_lateral,
        help="share of the --speed-frames instants asked with a lateral acceleration of about 0 whatever the road "
        "does, so that turns are read from the image (0..1; 0: none)",
    )
    parser.add_argument(
        "--speed-clear-path",
        action="store_true",
        help="keep only --speed-frames instants whose answer keeps clear of the drive's moving cars",
    )
    parser.add_argument(
        "--keep-best",
        action="store_true",
        help="probe the validation drives at the start, every --probe-every steps and at the end, and export the "
        "weights that do best there (gate pass rate, then ADE)",
    )
    parser.add_argument(
        "--judge",
        action="store_true",
        help="train nothing: judge the demo files in --init-from on the validation and test drives and write "
        "judgement.json into --out",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="continue training the demo files in this folder (e.g. a copy of the shipped weights)",
    )
    parser.add_argument(
        "--digit-weights",
        default=",".join(f"{w:g}" for w in defaults.digit_weights),
        help="loss weights of the answers' digits before the decimal point, first and second after it, e.g. "
        "'2,1,0.5' (default: all 1, the plain mean)",
    )
    parser.add_argument(
        "--suffix-noise",
        type=float,
        default=defaults.suffix_noise,
        help="share of the noisy answer copies masked from a random cut to the end of each block instead of token "
        "by token, the state a block is in when its earlier tokens are written first (0..1; 0: none)",
    )
    parser.add_argument(
        "--final-eval",
        choices=FINAL_EVALS,
        default=defaults.final_eval,
        help="after training, measure every held-out set and the sweeps ('full') or the validation drives only "
        "(for a stage that another continues)",
    )
    parser.add_argument("--text-hidden", type=int, default=defaults.sizes.text_hidden)
    parser.add_argument("--text-layers", type=int, default=defaults.sizes.text_layers)
    args = parser.parse_args(argv)
    try:
        digit_weights = tuple(float(w) for w in args.digit_weights.split(","))
    except ValueError:
        digit_weights = ()
    checks = [
        (
            len(digit_weights) == 3 and all(w > 0 for w in digit_weights),
            "--digit-weights must be three positive numbers, e.g. 2,1,0.5",
        ),
        (args.train_samples >= args.batch_size >= 1, "--train-samples must be >= --batch-size >= 1"),
        (args.epochs >= 1, "--epochs must be >= 1"),
        (args.noisy_copies >= 1, "--noisy-copies must be >= 1"),
        (args.lr > 0, "--lr must be > 0"),
        (args.warmup_steps >= 0, "--warmup-steps must be >= 0"),
        (args.eval_samples >= 1, "--eval-samples must be >= 1"),
        (args.frames_per_kind >= 1, "--frames-per-kind must be >= 1"),
        (1 <= args.train_drives <= len(TRAIN_DRIVE_SEEDS), f"--train-drives must be 1..{len(TRAIN_DRIVE_SEEDS)}"),
        (args.threads >= 1, "--threads must be >= 1"),
        (args.probe_every >= 0, "--probe-every must be >= 0"),
        (args.drive_frames >= 0, "--drive-frames must be >= 0"),
        (args.speed_frames >= 0, "--speed-frames must be >= 0"),
        (0.0 <= args.speed_blind_lateral <= 1.0, "--speed-blind-lateral must be in 0..1"),
        (0.0 <= args.suffix_noise <= 1.0, "--suffix-noise must be in 0..1"),
        (
            1 <= args.speed_drives <= len(DRIVE_SAMPLE_SEEDS),
            f"--speed-drives must be 1..{len(DRIVE_SAMPLE_SEEDS)}",
        ),
        (
            1 <= args.sample_drives <= len(DRIVE_SAMPLE_SEEDS),
            f"--sample-drives must be 1..{len(DRIVE_SAMPLE_SEEDS)}",
        ),
        (
            args.init_from is None or (args.init_from / demo_files.COMPACT_WEIGHTS).is_file(),
            f"--init-from must be a folder holding {demo_files.COMPACT_WEIGHTS} and {demo_files.MANIFEST}",
        ),
        (args.text_hidden >= 32 and args.text_hidden % 32 == 0, "--text-hidden must be a multiple of 32"),
        (args.text_layers >= 1, "--text-layers must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    settings = TrainSettings(
        train_samples=args.train_samples,
        epochs=args.epochs,
        batch_size=args.batch_size,
        noisy_copies=args.noisy_copies,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        eval_samples=args.eval_samples,
        frames_per_kind=args.frames_per_kind,
        train_drives=args.train_drives,
        threads=args.threads,
        probe_every=args.probe_every,
        drive_frames=args.drive_frames,
        sample_drives=args.sample_drives,
        drive_sizes=args.drive_sizes,
        speed_frames=args.speed_frames,
        speed_drives=args.speed_drives,
        speed_blind_lateral=args.speed_blind_lateral,
        speed_clear_path=args.speed_clear_path,
        keep_best=args.keep_best,
        digit_weights=digit_weights,  # type: ignore[arg-type]
        suffix_noise=args.suffix_noise,
        final_eval=args.final_eval,
        init_from=None if args.init_from is None else str(args.init_from),
        sizes=ModelSizes(text_hidden=args.text_hidden, text_layers=args.text_layers),
    )
    if args.judge:
        return judge_only(args.init_from, args.out, args.threads, parser)
    command_line = shlex.join(["wam-diff2-train-demo", *(sys.argv[1:] if argv is None else argv)])
    metrics = train(settings, args.out, command_line)
    print_report(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
