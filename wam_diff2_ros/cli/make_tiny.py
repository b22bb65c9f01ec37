"""`wam-diff2-make-tiny DIR`: build a tiny random WAM-Diff2 checkpoint in the real format, offline."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from wam_diff2_ros.cli import toolkit

PROG = "wam-diff2-make-tiny"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    import inspect

    from wam_diff2_ros.demo.tiny import make_tiny_checkpoint, tiny_config

    # The flags' defaults are the library's (one source).
    build = {name: p.default for name, p in inspect.signature(make_tiny_checkpoint).parameters.items()}
    sizes = {name: p.default for name, p in inspect.signature(tiny_config).parameters.items()}
    parser = toolkit.Parser(
        prog=PROG,
        description="Build a tiny WAM-Diff2 checkpoint (real config format, safetensors, real Qwen3 tokenizer "
        "and special-token ids, vision chat template) from a seed, without network access.",
    )
    parser.add_argument("out_dir", help="directory to create")
    parser.add_argument(
        "--seed", type=int, default=build["seed"], help="weight initialisation seed (default %(default)s)"
    )
    parser.add_argument(
        "--shards", type=int, default=build["shards"], help="split the weights into N safetensors shards"
    )
    parser.add_argument("--text-hidden", type=int, default=sizes["text_hidden"])
    parser.add_argument("--text-layers", type=int, default=sizes["text_layers"])
    parser.add_argument("--vision-hidden", type=int, default=sizes["vision_hidden"])
    parser.add_argument("--vision-depth", type=int, default=sizes["vision_depth"])
    parser.add_argument(
        "--output-scale",
        type=float,
        default=build["output_scale"],
        help="final-norm scale that makes the random model's proposals confident (0 = leave as initialised)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing non-empty directory")
    args = parser.parse_args(argv)

    out = Path(args.out_dir)
    problems = toolkit.below_minimum(args, shards=1)
    if out.exists() and any(out.iterdir()) and not args.force:
        problems.append(f"{out} exists and is not empty (use --force)")
    if (refused := toolkit.refuse(PROG, problems)) is not None:
        return refused
    path = make_tiny_checkpoint(
        out,
        seed=args.seed,
        shards=args.shards,
        output_scale=args.output_scale,
        text_hidden=args.text_hidden,
        text_layers=args.text_layers,
        vision_hidden=args.vision_hidden,
        vision_depth=args.vision_depth,
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
