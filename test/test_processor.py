"""Image preprocessing and tokenisation: token counts, patch layout, chat rendering, padding, bad images."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from core_helpers import noise_image, tiny_checkpoint
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_processor
from wam_diff2_ros.core.image_preprocess import (
    ImageInputError,
    ImageProcessorConfig,
    cut_patches,
    normalise,
    pixel_values,
    preprocess_image,
    repeat_in_time,
    resize_bicubic,
    resize_target_request,
)
from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt

pytestmark = pytest.mark.core

IMAGE_PAD_ID = 151655
QWEN3_VL_2B = ImageProcessorConfig()  # patch 16, merge 2, processor limits 65536..16777216 pixels


@pytest.fixture(scope="module")
def processor():
    return load_processor(inspect_checkpoint(tiny_checkpoint()))


# Counts of the reference pipeline (qwen-vl-utils resize + the checkpoint's Qwen2-VL fast image processor),
# observed by running it on these sizes with the default limits min_pixels=12544, max_pixels=2073600.
@pytest.mark.parametrize(
    ("width", "height", "tokens", "grid"),
    [
        (1920, 1080, 1980, (1, 66, 120)),  # 1920x1056 after the first resize
        (1600, 900, 1400, (1, 56, 100)),  # 1600x896
        (640, 360, 220, (1, 22, 40)),
        (100, 80, 64, (1, 16, 16)),  # 96x96 is below the processor's 256x256 floor -> upscaled to 256x256
        (224, 224, 64, (1, 16, 16)),
        (3000, 2000, 1980, (1, 72, 110)),  # scaled down to the 2073600-pixel budget
    ],
)
def test_reference_image_token_counts(processor, width, height, tokens, grid):
    inputs = processor([build_messages("Look: <image>", [noise_image(width, height)])])
    assert inputs.num_image_tokens == [tokens]
    assert int((inputs.input_ids == IMAGE_PAD_ID).sum()) == tokens
    assert tuple(inputs.image_grid_thw[0].tolist()) == grid
    assert inputs.pixel_values.shape == (grid[1] * grid[2], 3 * 2 * 16 * 16)


def test_1080p_resize_is_1920x1056():
    assert resize_target_request(1080, 1920, 32, 12544, 2073600) == (1056, 1920)
    processed = preprocess_image(noise_image(1920, 1080), QWEN3_VL_2B)
    assert processed.resized_size == (1920, 1056)
    assert processed.num_tokens == 1980


def test_first_resize_rounds_half_to_even():
    # 1040 / 32 = 32.5 rounds to 32 (Python's round), 1072 / 32 = 33.5 rounds to 34.
    assert resize_target_request(1040, 640, 32, 12544, 2073600)[0] == 1024
    assert resize_target_request(1072, 640, 32, 12544, 2073600)[0] == 1088


def test_pixel_limits_change_the_count(processor):
    small = load_processor(inspect_checkpoint(tiny_checkpoint()), min_pixels=3136, max_pixels=200704)
    image = noise_image(1920, 1080)
    assert small([build_messages("<image>", [image])]).num_image_tokens == [180]
    assert processor([build_messages("<image>", [image])]).num_image_tokens == [1980]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=32, max_value=4000),
    st.integers(min_value=32, max_value=4000),
    st.integers(min_value=1024, max_value=400_000),
    st.integers(min_value=0, max_value=3_000_000),
)
def test_first_resize_respects_factor_and_budget(height, width, min_pixels, extra):
    if max(height, width) / min(height, width) > 200:
        return
    max_pixels = min_pixels + extra
    h, w = resize_target_request(height, width, 32, min_pixels, max_pixels)
    assert h % 32 == 0 and w % 32 == 0 and h >= 32 and w >= 32
    rounded = (max(32, round(height / 32) * 32), max(32, round(width / 32) * 32))
    area = rounded[0] * rounded[1]
    if area > max_pixels:
        assert h * w <= max_pixels or min(h, w) == 32
    elif area < min_pixels:
        assert h * w >= min_pixels
    else:
        assert (h, w) == rounded


def test_patch_layout_matches_transformers_image_processor():
    transformers = pytest.importorskip("transformers")
    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor
    hf = cls(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        min_pixels=65536,
        max_pixels=16777216,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    image = noise_image(320, 256, seed=3)  # already a multiple of 32: no resize on either side
    expected = hf(images=[image], do_resize=False, return_tensors="pt")
    ours = preprocess_image(image, QWEN3_VL_2B)
    assert tuple(expected["image_grid_thw"][0].tolist()) == ours.grid_thw == (1, 16, 20)
    torch.testing.assert_close(ours.pixel_values, expected["pixel_values"].float(), atol=1e-6, rtol=0)


def patchify(image_chw, config):
    patches, grid = cut_patches(image_chw, config)
    return repeat_in_time(patches, config), grid


def test_patchify_repeats_the_still_frame_in_time():
    image = torch.arange(3 * 64 * 64, dtype=torch.float32).view(3, 64, 64)
    flat, grid = patchify(image, QWEN3_VL_2B)
    assert grid == (1, 4, 4)
    patch = flat[0].view(3, 2, 16, 16)
    torch.testing.assert_close(patch[:, 0], patch[:, 1])
    torch.testing.assert_close(patch[:, 0], image[:, :16, :16])
    # second patch of the first 2x2 merge window is the top row's second patch (merge-window order)
    torch.testing.assert_close(flat[1].view(3, 2, 16, 16)[:, 0], image[:, :16, 16:32])
    torch.testing.assert_close(flat[2].view(3, 2, 16, 16)[:, 0], image[:, 16:32, :16])


@pytest.mark.parametrize(
    ("size", "target", "strips"),
    [
        ((1920, 1080), (1920, 1056), True),  # the 1080p camera: only the height changes -> strips of columns
        ((1600, 1000), (1600, 1024), True),  # height scaled up
        ((1900, 1056), (1888, 1056), True),  # only the width changes -> strips of rows
        ((1000, 700), (1024, 704), False),  # both sides change: one PIL resize
        ((400, 300), (416, 300), False),  # too small to split
    ],
)
def test_first_resize_in_strips_has_the_bits_of_one_pil_resize(monkeypatch, size, target, strips):
    image = Image.fromarray(noise_image(*size, seed=size[0]), "RGB")
    expected = np.asarray(image.resize(target, resample=Image.Resampling.BICUBIC))
    calls = []
    stock = Image.Image.resize
    monkeypatch.setattr(Image.Image, "resize", lambda self, *a, **k: calls.append(self.size) or stock(self, *a, **k))
    resized = resize_bicubic(image, *target)
    assert resized.dtype == np.uint8 and resized.flags.writeable
    assert np.array_equal(resized, expected)
    split = strips and (os.cpu_count() or 1) > 1
    assert len(calls) == (4 if split else 1)


def test_a_lazily_loaded_file_image_gives_the_arrays_pixel_values(tmp_path):
    frame = noise_image(1920, 1080, seed=5)  # 1080p: the first resize runs in strips
    Image.fromarray(frame).save(tmp_path / "frame.png")
    with Image.open(tmp_path / "frame.png") as opened:  # not decoded until something loads it
        from_file = preprocess_image(opened, QWEN3_VL_2B)
    assert torch.equal(from_file.patches, preprocess_image(frame, QWEN3_VL_2B).patches)


CLIP_STATS = ImageProcessorConfig(  # per-channel statistics, so each channel has its own table
    image_mean=(0.48145466, 0.4578275, 0.40821073), image_std=(0.26862954, 0.26130258, 0.27577711)
)


@pytest.mark.parametrize("config", [QWEN3_VL_2B, CLIP_STATS], ids=["qwen3-vl", "clip-stats"])
@pytest.mark.parametrize(("width", "height"), [(1920, 1080), (517, 333), (64, 64)])
def test_pixel_values_have_the_bits_of_normalising_the_whole_image_first(config, width, height):
    """The patches are cut as uint8 and looked up in the normalisation table; the result must be bit for bit
    the float32 arithmetic on the whole resized image followed by the cut (the order of the reference)."""
    processed = preprocess_image(noise_image(width, height, seed=width), config)
    image = processed.patches  # rebuild the resized image from the uint8 patches, then take the old order
    _, grid_h, grid_w = processed.grid_thw
    m, p = config.merge_size, config.patch_size
    chw = image.view(grid_h // m, grid_w // m, m, m, 3, p, p).permute(4, 0, 2, 5, 1, 3, 6)
    chw = chw.reshape(3, grid_h * p, grid_w * p)
    assert chw.dtype == torch.uint8 and (chw.shape[2], chw.shape[1]) == processed.resized_size
    expected, grid = patchify(normalise(chw, config, channel_dim=0), config)
    assert grid == processed.grid_thw
    assert torch.equal(processed.pixel_values, expected)


def test_inputs_move_to_a_device_as_uint8_patches(processor):
    inputs = processor([build_messages("<image> and <image>", [noise_image(96, 64, 1), noise_image(64, 96, 2)])])
    assert inputs.image_patches.dtype == torch.uint8
    assert inputs.image_patches.shape == (inputs.pixel_values.shape[0], 3, 16 * 16)  # 1 byte per pixel, not 8
    moved = inputs.to("cpu")
    assert torch.equal(moved.pixel_values, inputs.pixel_values)
    assert torch.equal(moved.pixel_values, pixel_values(inputs.image_patches, inputs.image_config))
    with pytest.raises(TypeError, match="uint8 patches"):
        pixel_values(inputs.image_patches.float(), inputs.image_config)


def test_normalisation_is_x_minus_127_5_over_127_5():
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    image[:, :, 1] = 255
    out = preprocess_image(image, QWEN3_VL_2B).pixel_values.view(-1, 3, 2, 16, 16)
    assert torch.all(out[:, 0] == -1.0) and torch.all(out[:, 1] == 1.0)


def test_pil_rgba_and_mono_inputs_become_rgb():
    mono = np.full((64, 64), 128, dtype=np.uint8)
    rgba = Image.fromarray(np.full((64, 64, 4), 200, dtype=np.uint8), mode="RGBA")
    for image in (mono, rgba):
        assert preprocess_image(image, QWEN3_VL_2B).pixel_values.shape[1] == 1536


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((0, 0, 3), dtype=np.uint8),
        np.zeros((10, 0, 3), dtype=np.uint8),
        np.zeros((64, 64, 3), dtype=np.float32),
        np.zeros((64, 64, 5), dtype=np.uint8),
        np.zeros((1, 400, 3), dtype=np.uint8),  # aspect ratio 400 > 200
    ],
)
def test_bad_images_raise_a_clear_error(bad):
    with pytest.raises(ImageInputError):
        preprocess_image(bad, QWEN3_VL_2B)


def test_chat_rendering_matches_the_qwen3_vl_format(processor):
    prompt = build_planning_prompt("right", (4.66, -0.09), (0.17, -1.53))
    text = processor.render(build_messages(prompt, [noise_image(64, 64)]))
    assert text == (
        "<|im_start|>user\n"
        "Here is a front-view images from a driving vehicle:"
        "<|vision_start|><|image_pad|><|vision_end|>"
        "The navigation information is: right\n"
        "The current position is (0.00,0.00)\n"
        "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)\n"
        "Instruction: Based on the visual motion cues from the image (such as the relative speed of other vehicles "
        "and the changing distance to the intersection) and the provided telemetry, predict the optimal driving "
        "action for the next 4 seconds with 8 new waypoints.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    system = processor.render(build_messages("hi", [], system="Be brief."))
    assert system == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_special_tokens_keep_their_real_ids(processor):
    inputs = processor([build_messages("x <image>", [noise_image(64, 64)])])
    ids = inputs.input_ids[0].tolist()
    assert ids[0] == 151644  # <|im_start|>
    assert 151652 in ids and 151653 in ids  # vision start / end
    assert ids[-5:-3] == [151645, 198]  # <|im_end|> "\n" before "<|im_start|>assistant\n"


@pytest.mark.parametrize("side", ["left", "right"])
def test_batch_padding(processor, side):
    short = build_messages("a <image>", [noise_image(64, 64)])
    long = build_messages("a much longer question about the picture <image> with more words", [noise_image(64, 64)])
    inputs = processor([short, long], padding_side=side)
    mask = inputs.attention_mask
    assert mask[1].all()
    pads = int((mask[0] == 0).sum())
    assert pads > 0
    if side == "left":
        assert not mask[0, :pads].any() and mask[0, pads:].all()
    else:
        assert mask[0, : mask.shape[1] - pads].all() and not mask[0, mask.shape[1] - pads :].any()
    assert inputs.pixel_values.shape[0] == 2 * 256 and inputs.image_grid_thw.shape == (2, 3)  # 64x64 -> 256x256


def test_placeholder_count_must_match_images(processor):
    conversations = [build_messages("<image>", [noise_image(64, 64)])]
    conversations[0][0]["content"].append({"type": "text", "text": "<|image_pad|>"})
    with pytest.raises(ValueError, match="placeholders"):
        processor(conversations)
