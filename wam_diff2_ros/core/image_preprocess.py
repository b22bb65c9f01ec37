"""Image preprocessing exactly as the reference pipeline does it: the resize rules, the host (PIL) path, the patch
layout and the pixel values (the device path, core/device_preprocess.py, reuses the rules and the layout).

The reference inference script resizes every image with `qwen-vl-utils` (RGB, sides rounded to multiples
of 32 within `min_pixels`/`max_pixels`, PIL bicubic) and then hands it to the checkpoint's Qwen3-VL image
processor, which applies its own pixel limits (`size.shortest_edge` / `size.longest_edge` of
`preprocessor_config.json`), rescales, normalises and cuts 16x16 patches (two temporal copies of a still
image). This module does the same without torchvision or qwen-vl-utils, so it runs on any torch build.
Images leave it as uint8 patches; `pixel_values` turns them into the encoder's float32 input with the same bits
on whatever device they were moved to.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

DEFAULT_MIN_PIXELS = 12544
DEFAULT_MAX_PIXELS = 2073600
MAX_ASPECT_RATIO = 200
RESIZE_STRIPS = 4  # an image's first resize runs as this many strips in parallel threads (when it can)
RESIZE_STRIPS_MIN_PIXELS = 1 << 18  # smaller images are resized in one piece

_STRIP_POOL: ThreadPoolExecutor | None = None
_STRIP_POOL_LOCK = threading.Lock()


class ImageInputError(ValueError):
    """An image that cannot be turned into model input (empty, wrong shape, extreme aspect ratio)."""


def _round_half_even_multiple(value: float, factor: int) -> int:
    return round(value / factor) * factor


def _smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int, at_least_factor: bool
) -> tuple[int, int]:
    _check_size(height, width)
    h_bar = _round_half_even_multiple(height, factor)
    w_bar = _round_half_even_multiple(width, factor)
    if at_least_factor:
        h_bar, w_bar = max(factor, h_bar), max(factor, w_bar)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resize_target_request(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Target (height, width) of the first resize (qwen-vl-utils' `smart_resize`).

    Sides are rounded (Python's half-to-even `round`) to multiples of `factor` (at least one factor), then
    scaled down (floor) or up (ceil) so that the area lies within [min_pixels, max_pixels].
    """
    if max_pixels < min_pixels:
        raise ImageInputError(f"max_pixels ({max_pixels}) is smaller than min_pixels ({min_pixels})")
    return _smart_resize(height, width, factor, min_pixels, max_pixels, at_least_factor=True)


def resize_target_processor(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Target (height, width) of the image processor's own resize (transformers' Qwen2-VL `smart_resize`):
    the same rule, without the one-factor floor on the rounded sides."""
    return _smart_resize(height, width, factor, min_pixels, max_pixels, at_least_factor=False)


def _check_size(height: int, width: int) -> None:
    if height <= 0 or width <= 0:
        raise ImageInputError(f"image has no pixels ({width}x{height})")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ImageInputError(f"image aspect ratio {ratio:.0f} exceeds {MAX_ASPECT_RATIO} ({width}x{height})")


def to_pil_rgb(image: Any) -> Image.Image:
    """An RGB PIL image from a PIL image or an HxWx3 (RGB) / HxW (mono) uint8 array."""
    if isinstance(image, Image.Image):
        if image.width == 0 or image.height == 0:
            raise ImageInputError(f"image has no pixels ({image.width}x{image.height})")
        return image if image.mode == "RGB" else image.convert("RGB")
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ImageInputError(f"expected a uint8 image array, got dtype {array.dtype}")
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ImageInputError(f"expected an HxWx3 RGB array, got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageInputError(f"image has no pixels ({array.shape[1]}x{array.shape[0]})")
    return Image.fromarray(np.ascontiguousarray(array), mode="RGB")


@dataclass(frozen=True)
class ImageProcessorConfig:
    """The parts of a checkpoint's `preprocessor_config.json` that shape the pixel input."""

    patch_size: int = 16
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 65536
    max_pixels: int = 16777216
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    rescale_factor: float = 1.0 / 255.0

    @property
    def factor(self) -> int:
        """Side lengths are multiples of this (patch size x merge size)."""
        return self.patch_size * self.merge_size

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageProcessorConfig:
        """Read `preprocessor_config.json` content (Qwen2-VL / Qwen3-VL image processor keys)."""
        size = data.get("size") or {}
        min_pixels = size.get("shortest_edge", data.get("min_pixels", cls.min_pixels))
        max_pixels = size.get("longest_edge", data.get("max_pixels", cls.max_pixels))
        return cls(
            patch_size=int(data.get("patch_size", cls.patch_size)),
            temporal_patch_size=int(data.get("temporal_patch_size", cls.temporal_patch_size)),
            merge_size=int(data.get("merge_size", cls.merge_size)),
            min_pixels=int(min_pixels),
            max_pixels=int(max_pixels),
            image_mean=tuple(float(v) for v in data.get("image_mean", cls.image_mean)),
            image_std=tuple(float(v) for v in data.get("image_std", cls.image_std)),
            rescale_factor=float(data.get("rescale_factor", cls.rescale_factor)),
        )

    @classmethod
    def from_file(cls, path: Path) -> ImageProcessorConfig:
        """Read a `preprocessor_config.json` file."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass
class ProcessedImage:
    """One image cut into patches (uint8, before normalising and the temporal copies) and its (t, h, w) grid."""

    patches: torch.Tensor  # [t*h*w, C, patch_size**2] uint8, merge-window order
    grid_thw: tuple[int, int, int]
    resized_size: tuple[int, int]  # (width, height) fed to the vision encoder
    num_tokens: int  # visual tokens in the prompt (patches / merge_size**2)
    config: ImageProcessorConfig

    @functools.cached_property
    def pixel_values(self) -> torch.Tensor:
        """The vision encoder's input [t*h*w, C * temporal * patch**2], float32 (see `pixel_values`)."""
        return pixel_values(self.patches, self.config)


def _resize_like_torchvision(chw: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The fast Qwen2-VL processor's resize on CPU: antialiased bicubic straight on the uint8 tensor."""
    out = torch.nn.functional.interpolate(
        chw[None], size=(height, width), mode="bicubic", align_corners=False, antialias=True
    )
    return out[0]


def _strip_pool() -> ThreadPoolExecutor | None:
    """The threads that resize strips of an image (None on a one-core machine)."""
    global _STRIP_POOL
    workers = min(RESIZE_STRIPS, os.cpu_count() or 1)
    if workers > 1 and _STRIP_POOL is None:
        with _STRIP_POOL_LOCK:
            if _STRIP_POOL is None:
                _STRIP_POOL = ThreadPoolExecutor(workers, thread_name_prefix="wam_diff2_resize")
    return _STRIP_POOL


def resize_bicubic(image: Image.Image, width: int, height: int) -> np.ndarray:
    """`image` resized with PIL's bicubic filter (the reference's first resize), as an HxWx3 uint8 array.

    When only one side changes, PIL resamples along that side alone, so each output column (height changes)
    or row (width changes) depends on its own input column or row only: the image is cut into strips along
    the other side and they are resized in parallel threads (PIL releases the GIL) with the whole image's bits.
    """
    if (width, height) == image.size:
        return np.array(image, dtype=np.uint8)
    pool = _strip_pool()
    columns = width == image.width  # only the height changes: strips of whole columns
    one_side = columns or height == image.height
    if pool is None or not one_side or image.width * image.height < RESIZE_STRIPS_MIN_PIXELS:
        return np.array(image.resize((width, height), resample=Image.Resampling.BICUBIC), dtype=np.uint8)
    side = image.width if columns else image.height
    edges = [side * i // RESIZE_STRIPS for i in range(RESIZE_STRIPS + 1)]
    # cut on this thread (cropping may load the image), resize the separate strips in the pool
    if columns:
        pieces = [(image.crop((a, 0, b, image.height)), (b - a, height)) for a, b in itertools.pairwise(edges)]
    else:
        pieces = [(image.crop((0, a, image.width, b)), (width, b - a)) for a, b in itertools.pairwise(edges)]
    strips = pool.map(lambda piece: piece[0].resize(piece[1], resample=Image.Resampling.BICUBIC), pieces)
    return np.concatenate([np.asarray(strip, dtype=np.uint8) for strip in strips], axis=1 if columns else 0)


def preprocess_image(
    image: Any,
    config: ImageProcessorConfig,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> ProcessedImage:
    """Resize one image and cut it into uint8 patches exactly as the reference pipeline does (its pixel values:
    `ProcessedImage.pixel_values`)."""
    pil = to_pil_rgb(image)
    height, width = resize_target_request(pil.height, pil.width, config.factor, min_pixels, max_pixels)
    chw = torch.from_numpy(resize_bicubic(pil, width, height)).permute(2, 0, 1)
    final_h, final_w = resize_target_processor(height, width, config.factor, config.min_pixels, config.max_pixels)
    if (final_h, final_w) != (height, width):
        chw = _resize_like_torchvision(chw, final_h, final_w)
    patches, grid = cut_patches(chw, config)
    t, h, w = grid
    return ProcessedImage(
        patches=patches,
        grid_thw=grid,
        resized_size=(final_w, final_h),
        num_tokens=t * h * w // config.merge_size**2,
        config=config,
    )


def normalise(pixels: torch.Tensor, config: ImageProcessorConfig, channel_dim: int) -> torch.Tensor:
    """Rescale + normalise uint8 pixels in float32 as the fast processor fuses them: (x - mean / r) / (std / r)."""
    shape = [1] * pixels.dim()
    shape[channel_dim] = -1
    mean = torch.tensor(config.image_mean, dtype=torch.float32).view(shape) * (1.0 / config.rescale_factor)
    std = torch.tensor(config.image_std, dtype=torch.float32).view(shape) * (1.0 / config.rescale_factor)
    return (pixels.to(torch.float32) - mean) / std


def cut_patches(image_chw: torch.Tensor, config: ImageProcessorConfig) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """Cut a CxHxW image into patches [t*h*w, C, patch**2] in merge-window order (one copy, in its dtype)."""
    channels, height, width = image_chw.shape
    p, m = config.patch_size, config.merge_size
    grid_h, grid_w = height // p, width // p
    patches = image_chw.reshape(channels, grid_h // m, m, p, grid_w // m, m, p)
    # -> (h_block, w_block, h_in_block, w_in_block, channel, patch_row, patch_col)
    patches = patches.permute(1, 4, 2, 5, 0, 3, 6).reshape(grid_h * grid_w, channels, p * p)
    return patches, (1, grid_h, grid_w)


def repeat_in_time(patches: torch.Tensor, config: ImageProcessorConfig) -> torch.Tensor:
    """Patches [N, C, patch**2] of a still image as Qwen-VL's flat patches [N, C * temporal * patch**2]: the
    flat layout is (channel, temporal, patch_row, patch_col), the frame repeated `temporal_patch_size` times."""
    count = patches.shape[0]
    return patches.unsqueeze(2).expand(-1, -1, config.temporal_patch_size, -1).reshape(count, -1)


def pixel_table(config: ImageProcessorConfig) -> torch.Tensor:
    """[C, 256] float32: every uint8 value of each channel rescaled and normalised (`normalise`, on the CPU)."""
    channels = len(config.image_mean)
    return normalise(torch.arange(256, dtype=torch.uint8).expand(channels, -1), config, channel_dim=0)


def pixel_values(patches: torch.Tensor, config: ImageProcessorConfig) -> torch.Tensor:
    """The vision encoder's input [N, C * temporal * patch**2] (float32, on the patches' device) from uint8
    patches [N, C, patch**2]: each pixel looked up in `pixel_table` (so every device gets the bits of the CPU's
    arithmetic) and the still frame repeated in time. Moving the uint8 patches to a GPU and building this there
    moves an eighth of the bytes."""
    if patches.dtype != torch.uint8:
        raise TypeError(f"pixel_values needs uint8 patches, got {patches.dtype}")
    count, channels, size = patches.shape
    device = patches.device
    table = pixel_table(config).to(device).view(-1)
    offsets = torch.arange(0, channels * 256, 256, dtype=torch.int32, device=device).view(1, channels, 1)
    values = table.index_select(0, (patches.to(torch.int32) + offsets).view(-1))
    return repeat_in_time(values.view(count, channels, size), config)
