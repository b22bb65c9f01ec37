"""Host vs device image preprocessing (`wam-diff2-bench --preprocessing`): pixel values and host time.

For varied frames (sizes: a 16:9 camera, 4:3, one above `max_pixels`, one below `min_pixels`; contents:
noise, a smooth gradient with an edge, blocks) it compares the pixel values of

* the host path (`core.image_preprocess`: PIL resize on the CPU, uint8 patches, pixel values from the table),
* the device path (`core.device_preprocess`, on CUDA where there is one, else on CPU tensors),
* the reference: the project's qwen-vl-utils resize (PIL bicubic) followed by transformers' Qwen2-VL/Qwen3-VL
  image processor (its rescale, normalisation and patch layout),

and reports the largest absolute difference of the float pixel values (1 level of 255 = 2/255 ≈ 0.0078 here).
It times, per frame of the first size, the host path, the device path (wall time until its device work is done),
and the host's own share of the device path: copying the frame into its reused staging buffer (pinned, and the
transfer started, on CUDA).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wam_diff2_ros.core import image_preprocess
from wam_diff2_ros.core.device_preprocess import frame_to_device, host_frame, preprocess_image_on_device

SIZES = ((1920, 1080), (1280, 960), (3840, 2160), (100, 60))


def frames(width: int, height: int) -> dict[str, np.ndarray]:
    """Varied HxWx3 uint8 contents of one size: noise, a gradient with an edge, 8-pixel blocks."""
    rng = np.random.default_rng(width * 7919 + height)
    y, x = np.mgrid[0:height, 0:width]
    gradient = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], axis=2)
    gradient[height // 3 : height // 2, width // 4 : width // 2] = (250, 10, 40)
    blocks = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    return {
        "noise": rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
        "gradient": gradient.astype(np.uint8),
        "blocks": np.repeat(np.repeat(blocks, 8, axis=0), 8, axis=1)[:height, :width].copy(),
    }


def reference_pixel_values(image: np.ndarray, config: image_preprocess.ImageProcessorConfig) -> torch.Tensor | None:
    """qwen-vl-utils' resize (the project's pixel-identical PIL bicubic) then transformers' image processor;
    None when transformers has no Qwen2-VL image processor."""
    import transformers

    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or getattr(
        transformers, "Qwen2VLImageProcessor", None
    )
    if cls is None:
        return None
    pil = image_preprocess.to_pil_rgb(image)
    height, width = image_preprocess.resize_target_request(
        pil.height, pil.width, config.factor, image_preprocess.DEFAULT_MIN_PIXELS, image_preprocess.DEFAULT_MAX_PIXELS
    )
    resized = image_preprocess.resize_bicubic(pil, width, height)
    hf = cls(
        patch_size=config.patch_size,
        temporal_patch_size=config.temporal_patch_size,
        merge_size=config.merge_size,
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
        image_mean=list(config.image_mean),
        image_std=list(config.image_std),
    )
    return hf(images=[resized], return_tensors="pt")["pixel_values"].float()


def _median_ms(function: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return float(np.median(times))


def _synced(image: Any) -> Any:
    """`image` after its device work finished (the wall time of the device path, launches included)."""
    if image.patches.device.type == "cuda":
        torch.cuda.synchronize(image.patches.device)
    return image


def _frame_copier(frame: np.ndarray) -> Callable[[], Any]:
    """The device path's one host copy into its reused staging buffer (pinned on a CUDA machine, where the
    transfer is started too: `frame_to_device`; a plain reused buffer elsewhere)."""
    if torch.cuda.is_available():
        return lambda: frame_to_device(frame, torch.device("cuda"))
    buffer = torch.empty(frame.shape, dtype=torch.uint8)
    return lambda: np.copyto(buffer.numpy(), host_frame(frame).numpy())


def compare(sizes: Sequence[tuple[int, int]] = SIZES, repeats: int = 5) -> dict[str, Any]:
    """Largest pixel-value differences per size and content, and host times for the first size."""
    config = image_preprocess.ImageProcessorConfig()
    target = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where the device path runs
    limits = (image_preprocess.DEFAULT_MIN_PIXELS, image_preprocess.DEFAULT_MAX_PIXELS)
    rows = []
    for width, height in sizes:
        for content, image in frames(width, height).items():
            host = image_preprocess.preprocess_image(image, config, *limits).pixel_values
            device = preprocess_image_on_device(image, config, *limits, target).pixel_values.cpu()
            reference = reference_pixel_values(image, config)
            if reference is not None and reference.shape != device.shape:
                raise RuntimeError(f"{width}x{height}: the reference has {tuple(reference.shape)} pixel values")
            rows.append(
                {
                    "size": f"{width}x{height}",
                    "content": content,
                    "device_vs_host": float((device - host).abs().max()),
                    "device_vs_reference": None if reference is None else float((device - reference).abs().max()),
                    "host_vs_reference": None if reference is None else float((host - reference).abs().max()),
                }
            )
    width, height = sizes[0]
    frame = frames(width, height)["noise"]

    def on_device(image: np.ndarray) -> Any:
        return preprocess_image_on_device(image, config, *limits, target)

    timing = {
        "size": f"{width}x{height}",
        "host_path_ms": _median_ms(lambda: image_preprocess.preprocess_image(frame, config, *limits).patches, repeats),
        "device": str(target),
        "device_path_ms": _median_ms(lambda: _synced(on_device(frame)), repeats),
        "frame_copy_ms": _median_ms(_frame_copier(frame), repeats),
        "pinned": torch.cuda.is_available(),
    }
    return {"rows": rows, "timing": timing, "torch_threads": torch.get_num_threads(), "repeats": repeats}


def print_comparison(figures: dict[str, Any]) -> None:
    """The differences table and the host times."""

    def cell(value: float | None) -> str:
        return f"{'-':>14}" if value is None else f"{value:>14.2g}"

    print(f"{'frame':<12}{'content':<10}{'device-host':>14}{'device-ref':>14}{'host-ref':>14}  (max |Δ pixel value|)")
    for row in figures["rows"]:
        print(
            f"{row['size']:<12}{row['content']:<10}{cell(row['device_vs_host'])}"
            f"{cell(row['device_vs_reference'])}{cell(row['host_vs_reference'])}"
        )
    timing = figures["timing"]
    copy = "pinned, transfer started" if timing["pinned"] else "plain reused buffer: no CUDA here"
    print(
        f"{timing['size']} per frame, median of {figures['repeats']}, {figures['torch_threads']} torch threads: "
        f"host path {timing['host_path_ms']:.1f} ms; device path on {timing['device']} {timing['device_path_ms']:.1f} "
        f"ms (wall, synchronised); the device path's host copy ({copy} buffer) {timing['frame_copy_ms']:.2f} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`wam-diff2-bench preprocess-device` (also `wam-diff2-bench --preprocessing`); returns the exit code."""
    parser = argparse.ArgumentParser(prog="wam-diff2-bench preprocess-device", description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=SIZES[0][0], help="the first frame size compared")
    parser.add_argument("--height", type=int, default=SIZES[0][1])
    parser.add_argument("--iterations", type=int, default=5, help="timing repeats per frame")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.iterations < 1:
        print("wam-diff2-bench preprocess-device: error: need --iterations >= 1", file=sys.stderr)
        return 2
    figures = compare(((args.width, args.height), *SIZES[1:]), repeats=args.iterations)
    print_comparison(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0
