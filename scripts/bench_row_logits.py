"""The fast engine's CPU output layer (core/cpu_logits.py) against `lm_head` (MKL), per row count.

Random float32 weights [vocab, width]; for each row count: the median milliseconds of the kernel on that many
rows of a 1 x 32 block and of `lm_head` on the same rows, and whether every logit has the same bits as
`lm_head` on the whole block. Set OMP_NUM_THREADS; compare within one run.

    OMP_NUM_THREADS=2 python scripts/bench_row_logits.py --width 256 --width 2048
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch

from wam_diff2_ros.core.cpu_logits import ExactRowLogits


def median_ms(run: Callable[[], object], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, action="append", help="hidden width (repeatable; default 256, 2048)")
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8, 16, 24, 32])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}")
    all_same = True
    for width in args.width or [256, 2048]:
        head = torch.nn.Linear(width, args.vocab, bias=False)
        generator = torch.Generator().manual_seed(width)
        with torch.no_grad():
            head.weight.copy_(torch.randn(args.vocab, width, generator=generator) * 0.05)
            block = torch.randn(32, width, generator=generator)
            full = head(block.unsqueeze(0))[0]
            layer = ExactRowLogits(head)
            if layer(block, (1, 32)) is None:
                print(f"width {width}: the kernel is unavailable or matches no chunking here")
                return 1
            for rows in args.rows:
                picked = block[:rows]
                same = torch.equal(layer(picked, (1, 32)), full[:rows])
                all_same &= same
                kernel = median_ms(lambda picked=picked, layer=layer: layer(picked, (1, 32)), args.repeats)
                mkl = median_ms(lambda picked=picked, head=head: head(picked), args.repeats)
                print(
                    f"{args.vocab} x {width}, {rows:2d} rows: kernel {kernel:7.1f} ms, lm_head {mkl:7.1f} ms "
                    f"({mkl / kernel:4.1f}x), same bits {same}"
                )
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
