"""The fast engine's CPU kernels (core/engine/cpu_kernels.py) against the stock modules (MKL), with a bit check.

Random float32 weights. Output layer [vocab, width]: per row count, the median milliseconds of the kernel on
that many rows of a 1 x 32 block and of `lm_head` on the same rows, and whether every logit has the bits
`lm_head` gives it in the whole block. Projections (the 2B text layer's shapes, `--projections`): a 1 x 32
block through the kernel and through `nn.Linear`. Set OMP_NUM_THREADS; compare within one run.

    OMP_NUM_THREADS=2 wam-diff2-bench cpu-kernels --width 256 --width 2048 --projections
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from wam_diff2_ros.bench.timing import host_ms
from wam_diff2_ros.core.engine.cpu_kernels import ExactLinears, ExactRowLogits

PROJECTIONS = ((2048, 2048), (1024, 2048), (6144, 2048), (2048, 6144))  # (out, in): q/o, k/v, gate/up, down


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wam-diff2-bench cpu-kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, action="append", help="hidden width (repeatable; default 256, 2048)")
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8, 16, 24, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--projections", action="store_true", help="also the 2B text layer's projections")
    args = parser.parse_args(argv)
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
                kernel = host_ms(lambda picked=picked, layer=layer: layer(picked, (1, 32)), args.repeats)[0]
                mkl = host_ms(lambda picked=picked, head=head: head(picked), args.repeats)[0]
                print(
                    f"{args.vocab} x {width}, {rows:2d} rows: kernel {kernel:7.1f} ms, lm_head {mkl:7.1f} ms "
                    f"({mkl / kernel:4.1f}x), same bits {same}"
                )
    for outs, width in PROJECTIONS if args.projections else ():
        holder = torch.nn.Sequential(torch.nn.Linear(width, outs, bias=False))
        linears = ExactLinears(holder)
        module = holder[0]
        block = torch.randn(1, 32, width, generator=torch.Generator().manual_seed(outs))
        with torch.no_grad():
            stock_out = module(block)
            stock = host_ms(lambda module=module, block=block: module(block), args.repeats)[0]
            with linears.installed((1, 32)) as routed:
                if module not in routed:
                    print(f"{width} -> {outs}: the kernel is unavailable or matches no chunking here")
                    return 1
                same = torch.equal(module(block), stock_out)
                kernel = host_ms(lambda module=module, block=block: module(block), args.repeats)[0]
        all_same &= same
        print(
            f"projection {width} -> {outs}, 32 rows: kernel {kernel:6.2f} ms, nn.Linear {stock:6.2f} ms "
            f"({stock / kernel:4.1f}x), same bits {same}"
        )
    return 0 if all_same else 1
