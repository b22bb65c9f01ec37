"""Image preprocessing as torch operations on the model's device, with the host path's bits.

The host path (`image_preprocess.preprocess_image`) resizes with PIL on the CPU, cuts uint8 patches there and moves
them to the device. This path moves the camera frame itself (HxWx3 uint8 RGB, as the conversions layer gives
it; one copy through pinned memory, non-blocking on CUDA) and runs the resize and the patch layout on the
device; the patches then become pixel values there as on the host path (`image_preprocess.pixel_values`).

The first resize reproduces PIL's bicubic resampling in integer arithmetic, so its result is bit-identical
to PIL's on every device: PIL's filter weights (bicubic with a = -0.5, widened by the scale when shrinking,
normalised per output pixel) are computed here in float64 exactly as PIL computes them, turned into PIL's
22-bit fixed point, and applied in two separable passes (width, then height, each rounded and clipped to
uint8 as PIL does) by summing `taps` gathered rows in int32 (int64 when the sum could overflow). The image
processor's own second resize (only when the checkpoint's pixel limits change the size again) is the
torchvision-style antialiased bicubic: exact on the CPU (uint8 kernel), float arithmetic rounded to uint8 on
other devices.

Which path the engine uses: `PREPROCESS_MODES` / `DEFAULT_PREPROCESS` (the node's `model.preprocess`).
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import numpy as np
import torch

from .image_preprocess import (
    ImageInputError,
    ImageProcessorConfig,
    ProcessedImage,
    cut_patches,
    resize_target_processor,
    resize_target_request,
    to_pil_rgb,
)

PREPROCESS_MODES = ("host", "device")
# host: measured faster on the CPU (the device path's resize is a tap loop there, PIL's is threaded C); the
# device path on CUDA is not measured yet. The one source of the default (the node parameter reads it).
DEFAULT_PREPROCESS = "host"

PRECISION_BITS = 32 - 8 - 2  # PIL's fixed-point precision of the 8-bit resampling weights
BICUBIC_SUPPORT = 2.0


def _bicubic(x: float) -> float:
    """PIL's bicubic filter (a = -0.5)."""
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


@functools.lru_cache(maxsize=64)
def resample_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """PIL's bicubic weights of a resize from `in_size` to `out_size` samples, in its 8-bit fixed point.

    Returns (first input index per output [out], int64; weights [out, taps], int64, zero past each output's
    window). Follows PIL's `precompute_coeffs` and `normalize_coeffs_8bpc` (Resample.c) operation for operation.
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = BICUBIC_SUPPORT * filterscale
    taps = math.ceil(support) * 2 + 1
    starts = np.zeros(out_size, dtype=np.int64)
    weights = np.zeros((out_size, taps), dtype=np.int64)
    one = float(1 << PRECISION_BITS)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        ss = 1.0 / filterscale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        k = [_bicubic((x + xmin - center + 0.5) * ss) for x in range(xmax)]
        ww = 0.0
        for w in k:
            ww += w
        if ww != 0.0:
            k = [w / ww for w in k]
        starts[xx] = xmin
        for x, w in enumerate(k):
            weights[xx, x] = int(-0.5 + w * one) if w < 0 else int(0.5 + w * one)
    return starts, weights


def _resample_axis(image: torch.Tensor, axis: int, out_size: int) -> torch.Tensor:
    """One PIL bicubic pass of a uint8 tensor along `axis` (to `out_size` samples), on its device."""
    in_size = image.shape[axis]
    starts, weights = resample_taps(in_size, out_size)
    device = image.device
    bound = 255 * int(np.abs(weights).sum(axis=1).max()) + (1 << (PRECISION_BITS - 1))
    dtype = torch.int32 if bound < 2**31 else torch.int64
    index = torch.from_numpy(np.minimum(starts[:, None] + np.arange(weights.shape[1]), in_size - 1)).to(device)
    taps = torch.from_numpy(weights).to(device=device, dtype=dtype)
    view = [1] * image.dim()
    view[axis] = out_size
    total = torch.full((), 1 << (PRECISION_BITS - 1), dtype=dtype, device=device)
    for t in range(weights.shape[1]):
        rows = image.index_select(axis, index[:, t]).to(dtype)
        total = total + rows * taps[:, t].view(view)
    return (total >> PRECISION_BITS).clamp_(0, 255).to(torch.uint8)


def resize_bicubic_pil(image_hwc: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """An HxWxC uint8 tensor resized as PIL's `Image.resize(..., BICUBIC)` does, bit for bit, on its device."""
    if image_hwc.shape[1] != width:
        image_hwc = _resample_axis(image_hwc, 1, width)
    if image_hwc.shape[0] != height:
        image_hwc = _resample_axis(image_hwc, 0, height)
    return image_hwc


class PinnedStaging:
    """Reused pinned host buffers, one per frame shape, for non-blocking copies to a CUDA device.

    A fresh buffer per frame would pay the page faults of a 6 MB allocation every frame; a reused one must not
    be overwritten while its previous transfer may still be reading it, so each copy records an event and the
    next use of that buffer waits for it.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, ...], tuple[torch.Tensor, Any]] = {}
        self._lock = threading.Lock()

    def to_device(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        """`host` (uint8) on `device`: copied into the shape's pinned buffer, then sent without blocking."""
        with self._lock:
            buffer, event = self._buffers.get(tuple(host.shape), (None, None))
            if buffer is None:
                buffer = torch.empty(host.shape, dtype=torch.uint8, pin_memory=True)
            elif event is not None:
                event.synchronize()  # the previous frame's transfer has read the buffer
            np.copyto(buffer.numpy(), host.numpy())  # one memcpy on this thread (no thread pool)
            on_device = buffer.to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._buffers[tuple(host.shape)] = (buffer, event)
            return on_device


_STAGING = PinnedStaging()


def host_frame(image: np.ndarray) -> torch.Tensor:
    """An HxWx3 (or HxW mono) uint8 array checked and viewed as an HxWxC tensor (no copy when contiguous)."""
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ImageInputError(f"expected a uint8 image array, got dtype {array.dtype}")
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ImageInputError(f"expected an HxWx3 RGB array, got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageInputError(f"image has no pixels ({array.shape[1]}x{array.shape[0]})")
    return torch.from_numpy(np.ascontiguousarray(array))


def frame_to_device(image: np.ndarray, device: torch.device) -> torch.Tensor:
    """An HxWx3 uint8 array as a tensor on `device`: no copy on the CPU; on CUDA one copy into a reused pinned
    host buffer (`PinnedStaging`), then a non-blocking transfer."""
    host = host_frame(image)
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return _STAGING.to_device(host, device)
    return host.to(device)


def _second_resize(chw: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The image processor's antialiased bicubic on uint8 (CPU kernel) or in float, rounded (elsewhere)."""
    source = chw[None] if chw.device.type == "cpu" else chw[None].to(torch.float32)
    out = torch.nn.functional.interpolate(source, size=(height, width), mode="bicubic", antialias=True)
    return out[0] if out.dtype == torch.uint8 else out[0].round_().clamp_(0, 255).to(torch.uint8)


def preprocess_image_on_device(
    image: Any, config: ImageProcessorConfig, min_pixels: int, max_pixels: int, device: torch.device
) -> ProcessedImage:
    """`image_preprocess.preprocess_image` with the frame moved first and the resize and patch cut on `device`
    (uint8 patches on `device`; the same bits as the host path, see the module docstring)."""
    if not isinstance(image, np.ndarray):  # PIL images and the like: the host path's own conversion
        image = np.asarray(to_pil_rgb(image))
    frame = frame_to_device(image, device)
    if frame.shape[2] == 1:  # mono: the processor's RGB conversion repeats the channel
        frame = frame.expand(-1, -1, 3)
    in_h, in_w = frame.shape[0], frame.shape[1]
    height, width = resize_target_request(in_h, in_w, config.factor, min_pixels, max_pixels)
    chw = resize_bicubic_pil(frame, width, height).permute(2, 0, 1)
    final_h, final_w = resize_target_processor(height, width, config.factor, config.min_pixels, config.max_pixels)
    if (final_h, final_w) != (height, width):
        chw = _second_resize(chw, final_h, final_w)
    patches, grid = cut_patches(chw, config)
    t, h, w = grid
    return ProcessedImage(
        patches=patches.contiguous(),
        grid_thw=grid,
        resized_size=(final_w, final_h),
        num_tokens=t * h * w // config.merge_size**2,
        config=config,
    )
