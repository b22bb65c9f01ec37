"""The engine end to end on a real (tiny) checkpoint: prompt + image in, decoded text and timings out."""

from __future__ import annotations

import threading

import pytest
from core_helpers import noise_image, tiny_checkpoint

from wam_diff2_ros.core.engine import Engine
from wam_diff2_ros.core.engine.decoding import DecodeCancelledError, DecodeConfig
from wam_diff2_ros.core.image_preprocess import ImageInputError
from wam_diff2_ros.core.prompts import build_planning_prompt

pytestmark = pytest.mark.core


@pytest.fixture(scope="module")
def engine():
    return Engine.load(tiny_checkpoint(), device="cpu", dtype="float32")


def test_generate_planning_prompt(engine):
    prompt = build_planning_prompt("left", (5.0, 0.0), (0.2, 0.0))
    result = engine.generate(prompt, [noise_image(320, 180)], DecodeConfig(max_new_tokens=40, block_size=8))
    # 320x180 -> 320x192 (first resize) -> below the 65536-pixel processor floor -> 352x224 -> 22x14 patches / 4
    assert result.num_image_tokens == 77
    assert result.num_prompt_tokens > result.num_image_tokens
    assert len(result.sequence) == 40
    assert len(result.steps_per_block) >= 1 and all(1 <= s <= 32 for s in result.steps_per_block)
    assert result.token_ids == result.sequence[: len(result.token_ids)]
    assert 151645 not in result.token_ids
    assert result.text == engine.processor.decode(result.token_ids)
    t = result.timing
    assert min(t.preprocess_s, t.vision_s, t.prefill_s, t.denoise_s, t.commit_s) >= 0
    assert t.total_s >= t.preprocess_s + t.vision_s + t.prefill_s + t.denoise_s + t.commit_s - 1e-6
    assert t.vision_s > 0  # the vision encoder ran and was timed
    assert "<|vision_start|><|image_pad|>" in result.prompt_text


def test_same_request_same_answer(engine):
    prompt = build_planning_prompt("right", (3.0, 0.1), (0.0, 0.0))
    image = noise_image(200, 120, seed=4)
    config = DecodeConfig(max_new_tokens=16, block_size=8)
    assert engine.generate(prompt, [image], config).sequence == engine.generate(prompt, [image], config).sequence


def test_concurrent_calls_are_serialised(engine):
    prompt = build_planning_prompt("straight", (8.0, 0.0), (0.0, 0.0))
    image = noise_image(160, 120, seed=2)
    config = DecodeConfig(max_new_tokens=8, block_size=8)
    expected = engine.generate(prompt, [image], config).sequence
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(engine.generate(prompt, [image], config))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [r.sequence for r in results] == [expected] * 3


def test_text_only_and_bad_image(engine):
    assert engine.generate("hello", [], DecodeConfig(max_new_tokens=8, block_size=8)).num_image_tokens == 0
    with pytest.raises(ImageInputError):
        engine.generate("look <image>", [noise_image(1, 1)[:0]], DecodeConfig(max_new_tokens=8))


def test_closed_engine_refuses_work():
    closed = Engine.load(tiny_checkpoint(), device="cpu", dtype="float32")
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.generate("hi", [], DecodeConfig(max_new_tokens=8))


def test_cancel_stops_decoding_between_steps():
    engine = Engine.load(tiny_checkpoint(), device="cpu", dtype="float32")
    prompt = build_planning_prompt("left", (5.0, 0.0), (0.2, 0.0))
    config = DecodeConfig(max_new_tokens=16, block_size=8)
    engine.generate(prompt, [noise_image(64, 64)], config)  # decodes while no cancel is requested
    engine.cancel()
    with pytest.raises(DecodeCancelledError):
        engine.generate(prompt, [noise_image(64, 64)], config)
