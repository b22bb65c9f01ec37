"""core.device_preprocess: the resize and patch cut as torch operations, against PIL and the host path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from core_helpers import noise_image, tiny_checkpoint
from PIL import Image

from wam_diff2_ros.core import image_preprocess
from wam_diff2_ros.core.device_preprocess import (
    DEFAULT_PREPROCESS,
    PREPROCESS_MODES,
    preprocess_image_on_device,
    resample_taps,
    resize_bicubic_pil,
)
from wam_diff2_ros.core.engine import Engine
from wam_diff2_ros.core.engine.decoding import DecodeConfig

pytestmark = pytest.mark.core

CONFIG = image_preprocess.ImageProcessorConfig()


def gradient_image(width: int, height: int) -> np.ndarray:
    """Smooth content with an edge: what a camera sees more than noise."""
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) % 256], axis=2)
    image[height // 3 : height // 2, width // 4 : width // 2] = (250, 10, 40)
    return image.astype(np.uint8)


def pil_resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    return np.asarray(Image.fromarray(image).resize((width, height), resample=Image.Resampling.BICUBIC))


@pytest.mark.parametrize(
    ("size", "target"),
    [
        ((360, 640), (352, 640)),  # only the height changes (the rounding to 32 of a 16:9 frame)
        ((100, 130), (100, 96)),  # only the width shrinks
        ((37, 53), (64, 53)),  # upsampling one side
        ((2000, 30), (700, 30)),  # a strong reduction (wide filter window)
        ((90, 160), (64, 96)),  # both sides shrink
        ((30, 20), (64, 96)),  # both sides grow (below min_pixels)
    ],
)
@pytest.mark.parametrize("content", ["noise", "gradient"])
def test_resize_is_pils_bits(size: tuple[int, int], target: tuple[int, int], content: str) -> None:
    height, width = size
    image = noise_image(width, height, seed=height) if content == "noise" else gradient_image(width, height)
    out = resize_bicubic_pil(torch.from_numpy(image), target[1], target[0]).numpy()
    assert out.shape == (*target, 3)
    np.testing.assert_array_equal(out, pil_resize(image, target[1], target[0]))


def test_taps_are_normalised_fixed_point_windows() -> None:
    starts, weights = resample_taps(1080, 1056)
    assert starts.shape == (1056,) and weights.shape[0] == 1056
    sums = weights.sum(axis=1)
    assert np.all(np.abs(sums - (1 << 22)) <= weights.shape[1])  # each output's weights sum to one (rounding)
    assert starts[0] == 0 and starts[-1] + np.count_nonzero(weights[-1]) <= 1080


@pytest.mark.parametrize(
    ("width", "height", "exact"),
    [
        (640, 360, True),  # 16:9: the height is rounded to 352 (as 1920x1080 -> 1920x1056)
        (1000, 700, True),  # both sides rounded
        (900, 700, True),  # above max_pixels (here 300,000): both sides shrink
        (100, 60, True),  # below min_pixels: both sides grow
        # a narrow portrait frame grown on both sides: Pillow 13 resamples the height first for some such
        # sizes (its order rule is not documented); this path always does the width first
        (47, 300, False),
    ],
)
def test_device_path_gives_the_host_paths_pixel_values(width: int, height: int, exact: bool) -> None:
    image = noise_image(width, height, seed=width)
    limits = (image_preprocess.DEFAULT_MIN_PIXELS, 300_000 if width == 900 else image_preprocess.DEFAULT_MAX_PIXELS)
    host = image_preprocess.preprocess_image(image, CONFIG, *limits)
    device = preprocess_image_on_device(image, CONFIG, *limits, torch.device("cpu"))
    assert device.grid_thw == host.grid_thw and device.num_tokens == host.num_tokens
    assert device.resized_size == host.resized_size
    difference = (device.patches.to(torch.int16) - host.patches.to(torch.int16)).abs().max().item()
    if exact:
        assert difference == 0
        assert torch.equal(device.pixel_values, host.pixel_values)
    else:  # noise is the worst case for a different rounding order (measured: 20 levels of 255)
        assert 0 < difference <= 32


def test_mono_and_bad_frames() -> None:
    mono = noise_image(64, 48)[:, :, 0]
    host = image_preprocess.preprocess_image(mono, CONFIG)
    device = preprocess_image_on_device(mono, CONFIG, 12544, 2073600, torch.device("cpu"))
    assert torch.equal(device.patches, host.patches)
    with pytest.raises(image_preprocess.ImageInputError, match="uint8"):
        preprocess_image_on_device(np.zeros((8, 8, 3), np.float32), CONFIG, 12544, 2073600, torch.device("cpu"))
    with pytest.raises(image_preprocess.ImageInputError, match="no pixels"):
        preprocess_image_on_device(np.zeros((0, 8, 3), np.uint8), CONFIG, 12544, 2073600, torch.device("cpu"))


def test_engine_decodes_the_same_tokens_with_either_path() -> None:
    assert DEFAULT_PREPROCESS in PREPROCESS_MODES
    image = noise_image(320, 180, seed=3)
    answers = {}
    loaded = Engine.load(tiny_checkpoint(), device="cpu", dtype="float32")
    decode = DecodeConfig(max_new_tokens=16, block_size=8, denoising_steps=4)
    for mode in PREPROCESS_MODES:
        engine = Engine(loaded.model, loaded.processor, loaded.checkpoint, loaded.device, preprocess=mode)
        generation = engine.generate("<image>\nPlan.", [image], decode=decode)
        answers[mode] = (generation.sequence, generation.num_image_tokens)
    assert answers["host"] == answers["device"]
    with pytest.raises(ValueError, match="preprocess"):
        Engine(engine.model, engine.processor, engine.checkpoint, engine.device, preprocess="gpu")
