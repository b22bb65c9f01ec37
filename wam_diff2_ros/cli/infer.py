"""`wam-diff2-infer`: batch inference over a reference-format eval.json, like the reference's `gpu.py`.

The flags are the reference's (users script against them: keep their spelling); their decoding and pixel
defaults come from `DecodeConfig` and the processor. The work is `wam_diff2_ros.infer` (see its docstring
for the output records, resume, sharding under torchrun and seeding).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wam_diff2_ros.cli import toolkit
from wam_diff2_ros.core.engine.decoding import ENGINES, REMASKING_STRATEGIES, DecodeConfig
from wam_diff2_ros.core.image_preprocess import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from wam_diff2_ros.infer.batch import (
    BatchOptions,
    Shard,
    device_for,
    load_finished,
    merge_shards,
    run_samples,
    write_json_atomic,
)
from wam_diff2_ros.infer.samples import LOG, UsageError, load_samples

_DECODE = DecodeConfig()

PROG = "wam-diff2-infer"
#: Some samples failed (recorded with their ``error``), the others were predicted.
EXIT_SOME_FAILED = 3
EXIT_CODES = (
    "Exit codes: 0 every sample predicted; 1 the checkpoint cannot be loaded, or every sample failed; 2 bad "
    "command line or input file, or an existing --output_file without --resume / --overwrite (nothing written); "
    "3 some samples failed (each recorded with its error, the others predicted)."
)


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags (the reference's, plus device/dtype/seed/resume/batching)."""
    parser = toolkit.Parser(
        prog=PROG,
        description="Block-diffusion inference of a WAM-Diff2 checkpoint over a reference-format eval.json.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--model_id", required=True, help="checkpoint directory (config.json, *.safetensors, ...)")
    parser.add_argument("--input_file", required=True, help="eval.json: a list of samples with conversations")
    parser.add_argument("--output_file", required=True, help="where to write the predictions JSON")
    parser.add_argument("--max_new_tokens", type=int, default=_DECODE.max_new_tokens)
    parser.add_argument("--block_size", type=int, default=_DECODE.block_size, help="response block length")
    parser.add_argument(
        "--denoising_steps", type=int, default=_DECODE.denoising_steps, help="maximum denoising steps per block"
    )
    parser.add_argument("--temperature", type=float, default=_DECODE.temperature)
    parser.add_argument("--top_k", type=int, default=_DECODE.top_k)
    parser.add_argument("--top_p", type=float, default=_DECODE.top_p)
    parser.add_argument(
        "--remasking_strategy",
        default=_DECODE.remasking_strategy,
        choices=list(REMASKING_STRATEGIES),
    )
    parser.add_argument("--confidence_threshold", type=float, default=_DECODE.confidence_threshold)
    parser.add_argument(
        "--engine",
        default=_DECODE.engine,
        choices=list(ENGINES),
        help="decoding engine: exact (the reference's execution), fast (static cache, no host syncs inside a "
        "block), auto = fast where shown token-identical (CPU float32, CUDA float32/bfloat16), else exact",
    )
    parser.add_argument(
        "--deadline_ms",
        type=float,
        default=_DECODE.deadline_ms,
        help="decoding deadline per batch from its start (ms): fewer denoising steps when needed; 0 = none",
    )
    parser.add_argument("--no_cuda_graphs", action="store_true", help="fast engine on CUDA without CUDA graphs")
    parser.add_argument("--min_pixels", type=int, default=DEFAULT_MIN_PIXELS)
    parser.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS)
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] | npu[:N] (default: auto)")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16 | float16 | float32 (default: bfloat16)")
    parser.add_argument("--seed", type=int, default=None, help="seed every decode call (sampling reproducible)")
    parser.add_argument("--resume", action="store_true", help="keep finished samples of an existing output file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument("--batch_size", type=int, default=1, help="samples decoded together (default 1)")
    parser.add_argument("--padding_side", default="left", choices=["left", "right"], help="batch padding side")
    parser.add_argument("--save_every", type=int, default=10, help="rewrite the output every N samples")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `wam-diff2-infer`; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    input_path = Path(args.input_file).expanduser().absolute()
    output_path = Path(args.output_file).expanduser()
    try:
        samples = load_samples(input_path)
        if args.batch_size < 1 or args.save_every < 1:
            raise UsageError("--batch_size and --save_every must be >= 1")
        from wam_diff2_ros.core.engine.decoding import DecodeConfigError

        try:
            decode = DecodeConfig(
                max_new_tokens=args.max_new_tokens,
                block_size=args.block_size,
                denoising_steps=args.denoising_steps,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                remasking_strategy=args.remasking_strategy,
                confidence_threshold=args.confidence_threshold,
                seed=args.seed,
                engine=args.engine,
                cuda_graphs=not args.no_cuda_graphs,
                deadline_ms=args.deadline_ms,
            )
        except DecodeConfigError as exc:
            raise UsageError(str(exc)) from None
        shard = Shard.from_env(len(samples))
        final = shard.world_size <= 1
        target = output_path if final else shard.path_for(output_path)
        if output_path.exists() and not (args.resume or args.overwrite):
            raise UsageError(f"--output_file {output_path} exists: pass --resume to keep its finished samples or "
                             "--overwrite to replace it")  # fmt: skip
        done = load_finished(output_path) if args.resume else {}
    except UsageError as exc:
        toolkit.error(PROG, exc)
        return toolkit.EXIT_USAGE

    from wam_diff2_ros.core.checkpoint import CheckpointError
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.demo import resolve_model

    try:
        engine = Engine.load(
            resolve_model(args.model_id),
            device=device_for(args.device, shard),
            dtype=args.dtype,
            min_pixels=args.min_pixels,
            max_pixels=args.max_pixels,
        )
    except (CheckpointError, RuntimeError, ValueError) as exc:
        toolkit.error(PROG, exc)
        return toolkit.EXIT_FAILED
    LOG.info(
        "rank %d/%d: %s on %s (%s), samples %d..%d",
        shard.rank,
        shard.world_size,
        engine.name,
        engine.device,
        str(engine.dtype).removeprefix("torch."),
        shard.start,
        shard.end - 1,
    )
    options = BatchOptions(args.batch_size, args.padding_side, args.save_every, args.no_progress)
    mine = list(enumerate(samples))[shard.start : shard.end]
    records = run_samples(
        engine, mine, input_path.parent, decode, options, done, lambda rows: write_json_atomic(target, rows)
    )
    write_json_atomic(target, records)
    if not final:
        if shard.rank != 0:
            return exit_code(records, f"rank {shard.rank}")
        records = merge_shards(output_path, shard, len(samples))
        write_json_atomic(output_path, records)
    failed = sum(1 for r in records if "error" in r)
    LOG.info("wrote %s: %d predicted, %d failed", output_path, len(records) - failed, failed)
    return exit_code(records, str(output_path))


def exit_code(records: Sequence[dict[str, Any]], where: str) -> int:
    """0 when every record was predicted, :data:`EXIT_SOME_FAILED` (with a warning saying how many) when some
    failed, 1 (with an error) when every one did."""
    failed = sum(1 for r in records if "error" in r)
    if not failed:
        return toolkit.EXIT_OK
    if failed == len(records):
        toolkit.error(PROG, f"every sample failed ({failed} of {failed}; see the error of each in {where})")
        return toolkit.EXIT_FAILED
    toolkit.warning(PROG, f"{failed} of {len(records)} samples failed (see their error in {where})")
    return EXIT_SOME_FAILED


if __name__ == "__main__":
    sys.exit(main())
