"""How fast a denoising step's matrix products and attention can be, by variant: data for the next change.

A step multiplies 32 rows (batch 1 x block 32) by every text weight. The H200 profile (README) puts the
layers' products at about 1.7 ms per step, under half the copy bandwidth. This script times, per step (all
layers, each with its own weights so nothing stays in the L2 cache), the projections as the model has them
and merged (q/k/v as one product, gate/up as one; and whether merging keeps every output's bits), the
output layer, and the attention's score product in three precisions (float32 inputs, as `grouped_attention`
does now; bf16 inputs with a float32 result through `torch.bmm(..., out_dtype=)` where this torch has it;
bf16 throughout), and the whole attention of a step over a capacity bucket: masked SDPA after `repeat_kv`
(the fast engine), `grouped_attention` eager (the fused engine's, uncompiled here), flash attention in varlen
form reading only the used slots (`seqused_k`, a device tensor: capturable for every block), and unmasked
SDPA over exactly the used slots (a floor); and the vision encoder's patch embedding, transformers' Conv3d
against the same weights as one linear product. On CUDA each variant is captured into a CUDA graph and
replayed (as in the engine; median of `--replays`), so launch overhead is not counted; a variant this torch
or device lacks is reported and skipped.

    wam-diff2-bench probe-gpu-kernels --json kernels.json            # CUDA, the 2B shapes, bf16
    wam-diff2-bench probe-gpu-kernels --tiny --device cpu          # checks the script anywhere
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from wam_diff2_ros.bench.timing import host_ms, median_ms

# WAM-Diff2-B32-2B text model (core/model.py wam_diff2_2b_config) and a tiny stand-in for script checks
SHAPES = {
    "2b": {"hidden": 2048, "q": 2048, "kv": 1024, "mlp": 6144, "vocab": 151936, "layers": 28, "kv_heads": 8},
    "tiny": {"hidden": 64, "q": 64, "kv": 32, "mlp": 192, "vocab": 1000, "layers": 4, "kv_heads": 2},
}
HEAD_DIM = {"2b": 128, "tiny": 16}
ROWS = 32  # batch 1 x block 32
CONTEXT = 2304  # the capacity bucket of a 1080p plan (2105-token prompt + 128 new tokens, rounded up to 256)


def timed_ms(function: Callable[[], object], device: torch.device, replays: int) -> float:
    """Median ms of `function` (CUDA: captured once into a graph and replayed, timed as profile-gpu-step
    times its replays; elsewhere called and timed on the host)."""
    if device.type == "cuda":
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            function()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            function()
        return median_ms(graph.replay, replays)
    return host_ms(function, replays)[0]


def projections(shape: dict[str, int]) -> dict[str, list[tuple[int, int]]]:
    """(in, out) of each product per layer, as the model has them and merged."""
    hidden, q, kv, mlp = shape["hidden"], shape["q"], shape["kv"], shape["mlp"]
    return {
        "q, k, v (3 products)": [(hidden, q), (hidden, kv), (hidden, kv)],
        "q/k/v merged": [(hidden, q + 2 * kv)],
        "o": [(q, hidden)],
        "gate, up (2 products)": [(hidden, mlp), (hidden, mlp)],
        "gate/up merged": [(hidden, 2 * mlp)],
        "down": [(mlp, hidden)],
    }


def probe(size: str, device: torch.device, dtype: torch.dtype, replays: int) -> dict[str, dict[str, float]]:
    shape = SHAPES[size]
    layers = shape["layers"]
    results: dict[str, dict[str, float]] = {}

    def record(name: str, function: Callable[[], object], nbytes: int) -> None:
        ms = timed_ms(function, device, replays)
        results[name] = {"ms_per_step": ms, "read_mb": nbytes / 2**20, "gb_per_s": nbytes / ms / 1e6}
        print(f"  {name:<44} {ms:8.3f} ms per step  {nbytes / 2**20:8.1f} MB  {nbytes / ms / 1e6:7.0f} GB/s")

    generator = torch.Generator(device="cpu").manual_seed(0)

    def weights(n_in: int, n_out: int) -> torch.Tensor:
        return (torch.randn(n_out, n_in, generator=generator) * 0.02).to(device=device, dtype=dtype)

    for name, products in projections(shape).items():
        stack = [[weights(n_in, n_out) for n_in, n_out in products] for _ in range(layers)]
        inputs = [torch.randn(ROWS, n_in, device=device, dtype=dtype) for n_in, _ in products]

        def run(stack: list = stack, inputs: list = inputs) -> None:
            for layer in stack:
                for x, w in zip(inputs, layer, strict=True):
                    torch.nn.functional.linear(x, w)

        record(f"{name} x{layers} layers", run, sum(w.numel() * w.element_size() for ws in stack for w in ws))
        del stack
    results["merged products: same bits as separate"] = merged_bits(shape, device, dtype)
    head = weights(shape["hidden"], shape["vocab"])
    rows = torch.randn(ROWS, shape["hidden"], device=device, dtype=dtype)
    record("output layer", lambda: torch.nn.functional.linear(rows, head), head.numel() * head.element_size())

    heads, dim = shape["kv_heads"], HEAD_DIM[size]
    groups = shape["q"] // dim // heads
    query = torch.randn(heads, groups * ROWS, dim, device=device, dtype=dtype)
    keys = [torch.randn(heads, CONTEXT, dim, device=device, dtype=dtype) for _ in range(layers)]
    key_bytes = sum(k.numel() * k.element_size() for k in keys)
    short = str(dtype).removeprefix("torch.")
    record(
        f"scores, float32 inputs x{layers}",
        lambda: [torch.matmul(query.float(), k.float().transpose(-1, -2)) for k in keys],
        key_bytes,
    )
    record(f"scores, {short} throughout x{layers}", lambda: [query @ k.transpose(-1, -2) for k in keys], key_bytes)
    try:
        torch.bmm(query, keys[0].transpose(-1, -2), out_dtype=torch.float32)
    except (TypeError, RuntimeError, NotImplementedError) as exc:
        print(f"  scores with a float32 result from {short} inputs: not in this torch here ({type(exc).__name__})")
    else:
        record(
            f"scores, {short} inputs, float32 result x{layers}",
            lambda: [torch.bmm(query, k.transpose(-1, -2), out_dtype=torch.float32) for k in keys],
            key_bytes,
        )
    attention(shape, HEAD_DIM[size], device, dtype, record)
    results["patch embedding: linear vs Conv3d"] = patch_embedding(size, device, dtype, record)
    return results


def patch_embedding(
    size: str, device: torch.device, dtype: torch.dtype, record: Callable[..., None]
) -> dict[str, float | bool]:
    """The vision encoder's first layer on a 1080p frame's patches: transformers' Conv3d module (stride = kernel,
    which cuDNN runs slowly on some GPUs: transformers issue 45750) and the same weights as one linear product.
    Returns whether the two give the same bits (the fast engine may only switch if they do) and how far apart."""
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionPatchEmbed

    hidden, patches = (1024, 7920) if size == "2b" else (32, 64)  # 1920x1080 -> 7920 patches of 2x16x16 x 3
    config = Qwen3VLVisionConfig(hidden_size=hidden, patch_size=16, temporal_patch_size=2, in_channels=3)
    embed = Qwen3VLVisionPatchEmbed(config).to(device=device, dtype=dtype).eval()
    pixels = torch.randn(patches, 3 * 2 * 16 * 16, device=device, dtype=dtype)
    weight = embed.proj.weight.reshape(hidden, -1)
    input_bytes = pixels.numel() * pixels.element_size()
    with torch.no_grad():
        conv, linear = embed(pixels), torch.nn.functional.linear(pixels, weight, embed.proj.bias)
        record("patch embedding: Conv3d (transformers)", lambda: embed(pixels), input_bytes)
        record(
            "patch embedding: one linear product",
            lambda: torch.nn.functional.linear(pixels, weight, embed.proj.bias),
            input_bytes,
        )
    identical = bool(torch.equal(conv, linear))
    largest = float((conv.float() - linear.float()).abs().max())
    print(f"  patch embedding: linear gives the Conv3d's bits: {identical} (largest difference {largest:.3g})")
    return {"identical": identical, "max_abs_diff": largest}


def merged_bits(shape: dict[str, int], device: torch.device, dtype: torch.dtype) -> dict[str, bool]:
    """Whether one product on concatenated weights gives every output the bits of the separate products (then
    the bit-identical fast engine could merge q/k/v and gate/up; otherwise only the fused engine may)."""
    generator = torch.Generator(device="cpu").manual_seed(1)
    hidden = shape["hidden"]
    rows = torch.randn(ROWS, hidden, generator=generator).to(device=device, dtype=dtype)
    same = {}
    for name, outs in (("q/k/v", (shape["q"], shape["kv"], shape["kv"])), ("gate/up", (shape["mlp"], shape["mlp"]))):
        parts = [(torch.randn(n, hidden, generator=generator) * 0.02).to(device=device, dtype=dtype) for n in outs]
        separate = torch.cat([torch.nn.functional.linear(rows, w) for w in parts], dim=-1)
        merged = torch.nn.functional.linear(rows, torch.cat(parts, dim=0))
        same[name] = bool(torch.equal(separate, merged))
        print(f"  {name} merged gives the separate products' bits: {same[name]}")
    return same


def attention(
    shape: dict[str, int], dim: int, device: torch.device, dtype: torch.dtype, record: Callable[..., None]
) -> None:
    """The step's attention over a capacity bucket, per variant (see the module docstring)."""
    from wam_diff2_ros.core.engine.fused import grouped_attention

    layers, kv_heads = shape["layers"], shape["kv_heads"]
    heads = shape["q"] // dim
    used = CONTEXT - 71  # slots holding the prompt and the blocks so far (the 1080p plan's last block)
    query = torch.randn(1, heads, ROWS, dim, device=device, dtype=dtype)
    caches = [
        tuple(torch.randn(1, kv_heads, CONTEXT, dim, device=device, dtype=dtype) for _ in "kv") for _ in range(layers)
    ]
    mask = (torch.arange(CONTEXT, device=device) < used).view(1, 1, 1, -1).expand(1, 1, ROWS, -1)
    cache_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in caches)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def repeated(k: torch.Tensor) -> torch.Tensor:
        return k.repeat_interleave(heads // kv_heads, dim=1)

    variants = {
        f"attention: masked SDPA after repeat_kv x{layers}": lambda: [
            sdpa(query, repeated(k), repeated(v), attn_mask=mask) for k, v in caches
        ],
        f"attention: grouped_attention, eager x{layers}": lambda: [
            grouped_attention(query, k, v, mask, dim**-0.5) for k, v in caches
        ],
        f"attention: unmasked SDPA on the used slots x{layers}": lambda: [
            sdpa(query, k[:, :, :used], v[:, :, :used], enable_gqa=True) for k, v in caches
        ],
    }
    if device.type == "cuda":
        flat_q = query[0].transpose(0, 1).contiguous()  # [rows, heads, dim]
        flat = [(k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous()) for k, v in caches]
        cum_q = torch.tensor([0, ROWS], device=device, dtype=torch.int32)
        cum_k = torch.tensor([0, CONTEXT], device=device, dtype=torch.int32)
        seqused = torch.tensor([used], device=device, dtype=torch.int32)
        flash = torch.ops.aten._flash_attention_forward
        variants[f"attention: flash varlen, seqused_k x{layers}"] = lambda: [
            flash(flat_q, k, v, cum_q, cum_k, ROWS, CONTEXT, 0.0, False, False, seqused_k=seqused) for k, v in flat
        ]
    for name, function in variants.items():
        try:
            function()
            record(name, function, cache_bytes)
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            print(f"  {name}: not available here ({type(exc).__name__}: {str(exc)[:80]})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wam-diff2-bench probe-gpu-kernels",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 elsewhere")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (a check of the script)")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    size = "tiny" if args.tiny else "2b"
    print(
        f"matrix products of one denoising step ({size} shapes, {ROWS} rows, {dtype}, {device}, "
        f"torch {torch.__version__})"
    )
    results = probe(size, device, dtype, args.replays)
    if args.json:
        args.json.write_text(json.dumps({"shapes": size, "dtype": str(dtype), "products": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
