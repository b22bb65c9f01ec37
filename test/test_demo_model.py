"""The embedded demo model: materialisation, the training objective's equivalence with the decoder, quality.

The shipped compact weights (`wam_diff2_ros/demo/`) are expanded into temporary cache roots; the quality checks
decode held-out synthetic samples (other seeds and other drives than training) through the real engine with
the default decoding settings, on CPU in float32.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from core_helpers import patient

from wam_diff2_ros.core.cache import CACHE_ENV
from wam_diff2_ros.core.checkpoint import inspect_checkpoint
from wam_diff2_ros.core.engine import Engine
from wam_diff2_ros.core.engine.decoding import DecodeConfig, _block_causal_mask
from wam_diff2_ros.core.image_preprocess import preprocess_image
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.prompts import PLANNING_TEMPLATES, build_messages, build_planning_prompt
from wam_diff2_ros.demo import expand as demo
from wam_diff2_ros.demo import train as train_demo

pytestmark = pytest.mark.core

# Measured on held-out samples by the training script (metrics.json, valid_rate); see floor_from_metrics.
METRICS = json.loads((demo.DEMO_DIR / demo.METRICS).read_text(encoding="utf-8"))
HELD_OUT_PROMPTS = 16


def _tree_bytes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return demo.demo_checkpoint(cache_dir=tmp_path_factory.mktemp("demo_cache"))


@pytest.fixture(scope="module")
def engine(checkpoint):
    return Engine.load(checkpoint, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def held_out():
    """Held-out samples and the images of one held-out drive (not used in training)."""
    pool = train_demo.render_image_pool(train_demo.HELD_OUT_DRIVE_SEEDS[:1], 2, seed=train_demo.HELD_OUT_SEED)
    samples = train_demo.make_samples(HELD_OUT_PROMPTS, train_demo.HELD_OUT_SEED + 7, pool.by_command)
    return samples, pool


# --------------------------------------------------------------------------------------------------
# Shipping and materialisation


def test_shipped_files_are_compact_and_consistent():
    manifest = demo.load_manifest()
    compact = demo.DEMO_DIR / demo.COMPACT_WEIGHTS
    assert compact.stat().st_size == manifest["compact_bytes"] < 8_000_000
    assert demo.sha256_file(compact) == manifest["compact_sha256"]
    assert manifest["config"]["model_type"] == "wam_diff2"
    assert manifest["config"]["text_config"]["vocab_size"] == 151936
    tensors = demo.read_safetensors(compact)
    ids = tensors[demo.VOCAB_IDS_NAME]
    assert ids.tolist() == sorted(set(ids.tolist()))
    for special in (151645, 151652, 151653, 151655, 151671):  # EOS, vision start/end, image pad, mask
        assert special in ids.tolist()
    assert tensors[demo.EMBED_ROWS_NAME].shape == (len(ids), manifest["config"]["text_config"]["hidden_size"])


def test_materialised_checkpoint_is_real_format(checkpoint):
    info = inspect_checkpoint(checkpoint)
    assert info.config["model_type"] == "wam_diff2"
    assert info.tensors["model.language_model.embed_tokens.weight"].shape == (151936, 256)
    assert info.preprocessor.max_pixels == train_demo.DEMO_PREPROCESSOR_OVERRIDES["size"]["longest_edge"]
    assert checkpoint.name.startswith("demo-")
    assert demo.sha256_file(checkpoint / "model.safetensors") == demo.load_manifest()["model_safetensors_sha256"]


def test_materialisation_is_byte_identical_and_reused(tmp_path):
    first = demo.demo_checkpoint(cache_dir=tmp_path / "a")
    started = time.perf_counter()
    second = demo.demo_checkpoint(cache_dir=tmp_path / "b")
    first_use_s = time.perf_counter() - started
    assert _tree_bytes(first) == _tree_bytes(second)
    assert first.name == second.name
    assert first_use_s < patient(10.0)  # ~1 s on a quiet 2-core CPU
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert demo.demo_checkpoint(cache_dir=tmp_path / "a") == first  # reused, not rewritten
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime


def test_cache_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env_cache"))
    path = demo.demo_checkpoint()
    assert path.parent == tmp_path / "env_cache"


def test_concurrent_first_use_gives_one_complete_directory(tmp_path):
    results: list[Path] = []
    errors: list[BaseException] = []

    def materialise() -> None:
        try:
            results.append(demo.demo_checkpoint(cache_dir=tmp_path))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=materialise) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]  # no staging leftovers
    inspect_checkpoint(results[0])


def test_damaged_cache_is_rebuilt(tmp_path):
    path = demo.demo_checkpoint(cache_dir=tmp_path)
    weights = path / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(1000)
    assert demo.demo_checkpoint(cache_dir=tmp_path) == path
    assert demo.sha256_file(weights) == demo.load_manifest()["model_safetensors_sha256"]


def test_corrupt_shipped_weights_are_refused(tmp_path):
    shipped = tmp_path / "shipped"
    shutil.copytree(demo.DEMO_DIR, shipped)
    data = bytearray((shipped / demo.COMPACT_WEIGHTS).read_bytes())
    data[-5] ^= 0xFF
    (shipped / demo.COMPACT_WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(demo.DemoModelError, match="sha256"):
        demo.demo_checkpoint(cache_dir=tmp_path / "cache", demo_dir=shipped)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    (shipped / demo.MANIFEST).unlink()
    with pytest.raises(demo.DemoModelError, match="manifest"):
        demo.demo_checkpoint(cache_dir=tmp_path / "cache", demo_dir=shipped)


def test_safetensors_writer_round_trips_and_is_readable_by_safetensors(tmp_path):
    from safetensors.torch import load_file

    tensors = {
        "b": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "a": torch.tensor([1.5, -2.0], dtype=torch.float16),
        "ids": torch.tensor([3, 151671], dtype=torch.int64),
    }
    path = tmp_path / "t.safetensors"
    demo.write_safetensors(tensors, path)
    for loaded in (demo.read_safetensors(path), load_file(str(path))):
        assert set(loaded) == set(tensors)
        for name, tensor in tensors.items():
            assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor)


# --------------------------------------------------------------------------------------------------
# Synthetic data


def test_drive_samples_are_the_replays_question_and_answer():
    """A drive instant's sample: the bag's telemetry and command, the track's future in the ego frame (what the
    replay measures against); its mirror image is the same instant turning the other way."""
    from wam_diff2_ros.demo.train.drives import drive_samples, future_in_ego_frame
    from wam_diff2_ros.sim import simulate_drive

    pool, samples = drive_samples([5], 6, seed=3, sizes=[(320, 180)])
    track = simulate_drive(25.0, 5)
    assert len(samples) == 12 and len(pool.images) == 12
    assert {s.command for s in samples[0::2]} >= {"left", "straight"}  # TURN_SHARE of the instants near the turn
    for sample, mirrored in zip(samples[0::2], samples[1::2], strict=True):
        parsed = parse_waypoints(sample.answer, current_speed_mps=sample.speed)
        assert parsed.valid, (sample.answer, parsed.reason)
        image = pool.images[sample.image_index]
        assert image.shape == (180, 320, 3)
        assert np.array_equal(pool.images[mirrored.image_index], image[:, ::-1])
        assert mirrored.command == {"left": "right", "straight": "straight"}[sample.command]
        assert np.allclose(np.array(mirrored.waypoints), np.array(sample.waypoints) * [1.0, -1.0])
        assert mirrored.acceleration == (sample.acceleration[0], -sample.acceleration[1])
    # The future is the drive's 50 Hz odometry 0.5 .. 4 s later in the ego frame, here mid-turn.
    instants = [i for i, t in enumerate(track.stamps_ns.tolist()) if track.command_at(t) == "left"]
    now = instants[len(instants) // 2]
    later = [now + 25 * k for k in range(1, 9)]  # 50 Hz: 25 samples per 0.5 s
    dx, dy, yaw = track.x[later] - track.x[now], track.y[later] - track.y[now], track.yaw[now]
    expected = np.stack([np.cos(yaw) * dx + np.sin(yaw) * dy, -np.sin(yaw) * dx + np.cos(yaw) * dy], axis=1)
    assert expected[-1, 1] > 3.0  # turning left
    np.testing.assert_allclose(future_in_ego_frame(track, int(track.stamps_ns[now])), expected, atol=1e-3)


def test_camera_drive_sizes_ask_mostly_at_the_sample_bags_image_grid(engine):
    """``--drive-sizes camera`` renders six drive instants in eight at the image-token grid of the sample bag's
    960x540 camera, ``mixed`` four in eight."""
    from wam_diff2_ros.demo.train.drives import drive_samples

    processor = engine.processor

    def grid(image: np.ndarray) -> tuple[int, ...]:
        pixels = preprocess_image(image, processor.image_config, processor.min_pixels, processor.max_pixels)
        return tuple(pixels.grid_thw)

    bag_grid = grid(np.zeros((540, 960, 3), dtype=np.uint8))
    on_grid = {}
    for name, sizes in train_demo.DRIVE_IMAGE_SIZES.items():
        pool, samples = drive_samples([5], len(sizes), seed=3, sizes=sizes)
        assert sorted(image.shape[1::-1] for image in pool.images[0::2]) == sorted(sizes)
        on_grid[name] = sum(grid(pool.images[sample.image_index]) == bag_grid for sample in samples[0::2])
    assert on_grid == {"mixed": 4, "camera": 6}


def test_ground_truth_follows_command_and_speed():
    rng_choices = {command: [0] for command in train_demo.COMMANDS}
    samples = train_demo.make_samples(400, 123, rng_choices)
    for sample in samples:
        parsed = parse_waypoints(sample.answer)
        assert parsed.valid, sample.answer
        assert np.allclose([[w.x, w.y] for w in parsed.waypoints], sample.waypoints)
        assert 0.0 <= sample.speed <= train_demo.MAX_SPEED + 1e-9
        assert "-0.00" not in sample.answer.split(",")
        assert sample.prompt == build_planning_prompt(sample.command, sample.velocity, sample.acceleration)
    final_y = {
        c: np.mean([s.waypoints[-1][1] for s in samples if s.command == c]) for c in ("left", "right", "straight")
    }
    assert final_y["left"] > 2.0 and final_y["right"] < -2.0 and abs(final_y["straight"]) < 1.0
    slow = [train_demo.path_length(np.array(s.waypoints)) for s in samples if s.speed < 5]
    fast = [train_demo.path_length(np.array(s.waypoints)) for s in samples if s.speed > 15]
    assert np.median(fast) > 3 * np.median(slow)


def test_kinematics_stop_and_turn_geometry():
    t = np.array([1.0, 2.0, 4.0])
    assert np.allclose(train_demo.travelled_distance(4.0, -2.0, t), [3.0, 4.0, 4.0])  # stops after 2 s, 4 m
    assert np.allclose(
        train_demo.travelled_distance(21.0, 1.0, t), [21.5, 21.5 + 22.0, 21.5 + 66.0]
    )  # 22 m/s cap reached at 1 s
    radius = 10.0
    quarter = np.pi * radius / 2
    end = train_demo.path_points([0.0], [1.0 / radius], np.array([quarter]))[0]
    assert np.allclose(end, [radius, radius], atol=1e-3)  # a quarter circle to the left


def test_vocabulary_covers_any_planning_prompt(checkpoint):
    """Every token a planning prompt or answer can hold has a trained (non-zero) embedding row."""
    engine_processor = Engine.load(checkpoint, device="cpu", dtype="float32").processor
    stored = set(demo.read_safetensors(demo.DEMO_DIR / demo.COMPACT_WEIGHTS)[demo.VOCAB_IDS_NAME].tolist())
    rng = np.random.default_rng(5)
    for template in PLANNING_TEMPLATES:
        for command in train_demo.COMMANDS:
            numbers = rng.uniform(-150, 150, 4)
            prompt = build_planning_prompt(command, tuple(numbers[:2]), tuple(numbers[2:]), template=template)
            assert set(train_demo.prompt_token_ids(engine_processor, prompt, 120)) <= stored
    answer = train_demo.format_answer(rng.uniform(-99, 99, 16))
    assert set(engine_processor.tokenizer(answer)["input_ids"]) <= stored


# --------------------------------------------------------------------------------------------------
# The training forward is the decoder's computation


def _shipped_vocabulary() -> tuple[list[int], np.ndarray]:
    """The shipped weights' token ids and the training-vocabulary row of every real id (-1: none)."""
    vocab = demo.read_safetensors(demo.DEMO_DIR / demo.COMPACT_WEIGHTS)[demo.VOCAB_IDS_NAME].tolist()
    row_of = np.full(train_demo.FULL_VOCAB_SIZE, -1, dtype=np.int64)
    row_of[vocab] = np.arange(len(vocab))
    return vocab, row_of


def test_training_forward_matches_decoder_step_logits(engine, held_out):
    samples, pool = held_out
    sample = samples[0]
    processor, backbone = engine.processor, engine.backbone
    inputs = processor([build_messages(sample.prompt, [pool.images[sample.image_index]])])
    prompt_ids = train_demo.prompt_token_ids(processor, sample.prompt, inputs.num_image_tokens[0])
    assert prompt_ids == inputs.input_ids[0].tolist()  # the training tokenisation is the processor's
    response = train_demo.response_token_ids(processor, sample.answer)
    vocab, row_of = _shipped_vocabulary()
    training_model = train_demo.restrict_vocabulary(engine.model, engine.checkpoint.config, vocab)
    rng = np.random.default_rng(3)
    copies = [train_demo.noise_response(response, rng)[0] for _ in range(2)]
    example = train_demo.TrainingExample(
        prompt_ids, response, inputs.pixel_values, tuple(inputs.image_grid_thw[0].tolist())
    )
    batch = train_demo.build_batch([example], [copies], row_of)
    with torch.no_grad():
        trained_logits = train_demo.noisy_logits(training_model, batch)

    block, prompt_len, response_len = 32, len(prompt_ids), len(response)
    num_blocks = response_len // block
    full_mask = _block_causal_mask(prompt_len, num_blocks, block, 1, torch.device("cpu"))
    with torch.no_grad():
        positions, delta = backbone.rope_index(inputs.input_ids, inputs.attention_mask, inputs.image_grid_thw)
        cache = backbone.prefill(
            inputs.input_ids,
            full_mask[:, :, :prompt_len, :prompt_len],
            positions,
            inputs.pixel_values,
            inputs.image_grid_thw,
        ).cache
        for b in range(num_blocks):
            start = prompt_len + b * block
            block_positions = (torch.arange(start, start + block).view(1, -1) + delta).unsqueeze(0).expand(3, -1, -1)
            step_mask = full_mask[:, :, start : start + block, : start + block]
            for c, copy in enumerate(copies):
                tokens = torch.tensor(copy[b * block : (b + 1) * block]).view(1, -1)
                decoder_logits = backbone.step_logits(tokens, block_positions, step_mask, cache)[0].double()
                ours = trained_logits[c * response_len + b * block : c * response_len + (b + 1) * block].double()
                assert torch.allclose(decoder_logits[:, vocab], ours, atol=1e-4, rtol=1e-4)
                others = torch.ones(decoder_logits.shape[1], dtype=torch.bool)
                others[vocab] = False
                assert torch.count_nonzero(decoder_logits[:, others]) == 0  # zero rows -> logit exactly 0
                # The restricted softmax with the background logit is the full-vocabulary softmax.
                full = torch.log_softmax(decoder_logits, dim=-1)[:, vocab]
                restricted = torch.log_softmax(train_demo.with_background(ours), dim=-1)[:, :-1]
                assert torch.allclose(full, restricted, atol=1e-4)
            backbone.commit(
                torch.tensor(response[b * block : (b + 1) * block]).view(1, -1), block_positions, step_mask, cache
            )


def test_an_optimisation_step_lowers_the_loss(engine, held_out):
    samples, pool = held_out
    processor = engine.processor
    vocab, row_of = _shipped_vocabulary()
    fresh = train_demo.build_training_model(train_demo.demo_config(), vocab, seed=0).train()
    pixels = [
        preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels) for img in pool.images
    ]
    examples = train_demo.tokenise(samples[:2], processor, pixels)
    batch = train_demo.make_batch(examples, 1, np.random.default_rng(0), row_of)
    optimizer = torch.optim.AdamW(fresh.parameters(), lr=3e-3)
    before = train_demo.diffusion_loss(fresh, batch)
    assert abs(before.item() - np.log(train_demo.FULL_VOCAB_SIZE)) < 0.5  # untrained: ~uniform over 151936
    for _ in range(3):
        optimizer.zero_grad()
        train_demo.diffusion_loss(fresh, batch).backward()
        optimizer.step()
    embedding = fresh.model.language_model.embed_tokens.weight
    assert embedding.shape[0] == len(vocab)
    with torch.no_grad():
        assert train_demo.diffusion_loss(fresh, batch).item() < before.item() - 0.5


def test_digit_weights_weigh_each_place_and_make_a_weighted_mean(engine, held_out):
    samples, pool = held_out
    processor = engine.processor
    answer_ids = train_demo.response_token_ids(processor, "5.23,-10.47,12.3")
    texts = [processor.tokenizer.decode([t]) for t in answer_ids]
    weights = train_demo.digit_place_weights(texts, (2.0, 0.5, 0.25))
    by_text = list(zip(texts, weights, strict=True))
    assert [w for t, w in by_text if t.isdigit()] == [2.0, 0.5, 0.25, 2.0, 2.0, 0.5, 0.25, 2.0, 2.0, 0.5]
    assert all(w == 1.0 for t, w in by_text if not t.isdigit())  # separators, signs, points, EOS
    with pytest.raises(ValueError, match="3 digit-place weights"):
        train_demo.digit_place_weights(texts, (1.0, 1.0))

    vocab, row_of = _shipped_vocabulary()
    model = train_demo.restrict_vocabulary(engine.model, engine.checkpoint.config, vocab)
    pixels = [
        preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels) for img in pool.images
    ]
    plain = train_demo.tokenise(samples[:2], processor, pixels)
    weighted = train_demo.tokenise(samples[:2], processor, pixels, (2.0, 0.5, 0.25))
    assert all(e.response_weights is None for e in plain)
    plain_batch = train_demo.make_batch(plain, 1, np.random.default_rng(3), row_of)
    short = [dataclasses.replace(weighted[0], response_weights=weighted[0].response_weights[:-1])]
    with pytest.raises(ValueError, match="response weights for"):
        train_demo.make_batch(short, 1, np.random.default_rng(3), row_of)
    batch = train_demo.make_batch(weighted, 1, np.random.default_rng(3), row_of)
    with torch.no_grad():
        logits = train_demo.with_background(train_demo.noisy_logits(model, batch, only_masked=True))
        per_token = torch.nn.functional.cross_entropy(logits, batch.targets[batch.noisy_masked], reduction="none")
        w = batch.target_weights[batch.noisy_masked]
        assert set(w.tolist()) == {2.0, 0.5, 0.25, 1.0}
        expected = (per_token * w).sum() / w.sum()
        assert torch.allclose(train_demo.diffusion_loss(model, batch), expected, atol=1e-5)
        assert torch.allclose(train_demo.diffusion_loss(model, plain_batch), per_token.mean(), atol=1e-5)
        # the fractional digits are the hard ones: the weighted mean sits below the plain one
        assert train_demo.diffusion_loss(model, batch) < train_demo.diffusion_loss(model, plain_batch)


def test_an_unknown_final_evaluation_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="final_eval must be one of"):
        train_demo.train(train_demo.TrainSettings(final_eval="everything"), tmp_path / "out", "test")
    assert not (tmp_path / "out").exists()  # nothing rendered, trained or written


# --------------------------------------------------------------------------------------------------
# Quality through the real decoder


def floor_from_metrics() -> float:
    """The asserted valid-answer floor: the measured rate minus a margin for a 16-prompt sample."""
    measured = METRICS["held_out"]["valid_rate"]
    return max(0.5, measured - 0.2)


def test_held_out_valid_answer_rate_and_error(engine, held_out):
    samples, pool = held_out
    metrics = train_demo.evaluate(engine, samples, pool.images, DecodeConfig())
    assert metrics["valid_rate"] >= floor_from_metrics(), metrics
    assert metrics["ade_m"] is not None and metrics["ade_m"] < 3.0 * max(METRICS["held_out"]["ade_m"], 0.5)
    assert metrics["mean_steps_per_block"] < 32  # the confidence threshold unmasks several tokens per step


def _plan(engine, image, command: str, speed: float, lateral_accel: float = 0.0) -> np.ndarray:
    prompt = build_planning_prompt(command, (speed, 0.0), (0.0, lateral_accel))
    result = engine.generate(prompt, [image], DecodeConfig())
    # The answer's format and how it follows the prompt; the toy model's paths often fail the kinematic
    # plausibility gate (README: measured on the sample drive), which is not what these tests are about.
    parsed = parse_waypoints(result.text, check_kinematics=False)
    assert parsed.valid, result.text
    return np.array([[w.x, w.y] for w in parsed.waypoints])


def test_faster_prompt_gives_longer_path(engine, held_out):
    _, pool = held_out
    image = pool.images[pool.by_command["straight"][0]]
    lengths = [train_demo.path_length(_plan(engine, image, "straight", speed)) for speed in (3.0, 9.0, 16.0)]
    assert lengths[0] < lengths[1] < lengths[2], lengths
    assert 4.0 * 16.0 * 0.7 < lengths[2] < 4.0 * 16.0 * 1.3  # about speed x 4 s at zero acceleration


def test_a_turn_prompt_sets_the_turn_direction(engine, held_out):
    """A turn asked as a car in it asks (the command and the lateral acceleration it measures, as the drive
    instants it was trained on ask) ends on its side. The command alone at zero lateral acceleration no longer
    bends the path (docs/demo_model.md)."""
    _, pool = held_out
    left = _plan(engine, pool.images[pool.by_command["left"][0]], "left", 8.0, lateral_accel=2.0)
    right = _plan(engine, pool.images[pool.by_command["right"][0]], "right", 8.0, lateral_accel=-2.0)
    straight = _plan(engine, pool.images[pool.by_command["straight"][0]], "straight", 8.0)
    assert left[-1, 1] > 1.0
    assert right[-1, 1] < -1.0
    assert abs(straight[-1, 1]) < min(left[-1, 1], -right[-1, 1])


def test_plans_on_held_out_drives_pass_the_kinematic_gate(engine):
    """Instants of a drive never trained on, asked as the replay asks them: the plans pass the node's gate."""
    from wam_diff2_ros.demo.train.drives import drive_samples

    pool, samples = drive_samples(train_demo.HELD_OUT_DRIVE_SEEDS[1:2], 6, seed=train_demo.HELD_OUT_SEED + 7)
    metrics = train_demo.evaluate(engine, samples, pool.images, DecodeConfig())
    measured = METRICS["held_out_drives"]["plausible_rate"]
    assert metrics["plausible_rate"] >= measured - 0.25, metrics  # 12 instants against the measured 48
    assert metrics["ade_m"] is not None and metrics["ade_m"] < 2.0 * METRICS["held_out_drives"]["ade_m"]


def test_plans_at_any_speed_on_a_test_road_pass_the_gate_near_the_measured_rate(engine):
    """Instants at any speed and pose on a test drive's road (never trained on, never used to choose the weights):
    the share that passes the gate stays near the one measured on the validation drives."""
    from wam_diff2_ros.demo.train.speeds import speed_samples

    pool, samples = speed_samples(train_demo.TEST_DRIVE_SEEDS[3:4], 6, seed=train_demo.HELD_OUT_SEED + 37)
    metrics = train_demo.evaluate(engine, samples, pool.images, DecodeConfig())
    measured = METRICS["validation_speeds"]  # the same kind of instants on the validation drives
    assert metrics["plausible_rate"] >= measured["plausible_rate"] - 0.3, metrics  # 12 plans against 48
    assert sum(b["plans"] for b in metrics["by_speed_band"]) == len(samples)


def test_suffix_noise_masks_each_block_from_a_cut():
    response = list(range(100, 196))  # three blocks of 32
    rng = np.random.default_rng(5)
    seen_cuts = set()
    for _ in range(50):
        tokens, levels = train_demo.noise_response(response, rng, suffix=True)
        for b, level in enumerate(levels):
            block = tokens[32 * b : 32 * (b + 1)]
            masked = [t == train_demo.MASK_ID for t in block]
            cut = masked.index(True)  # at least the last token of a block is masked
            assert all(masked[cut:]) and not any(masked[:cut])  # one masked tail, the rest as answered
            assert block[:cut] == response[32 * b : 32 * b + cut]
            assert level == (32 - cut) / 32
            seen_cuts.add(cut)
    assert len(seen_cuts) > 20  # the cut is drawn over the whole block
    short = list(range(100, 140))  # a last block of 8 tokens keeps its length
    tokens, levels = train_demo.noise_response(short, rng, suffix=True)
    assert len(tokens) == len(short) and tokens[-1] == train_demo.MASK_ID and 0 < levels[1] <= 1
    tokens, levels = train_demo.noise_response(short, rng)  # token by token, likewise
    assert len(tokens) == len(short) and len(levels) == 2


def _masked_tails(batch, copies: int) -> list[bool]:
    """Per noisy copy of `batch` (its examples in order), whether every block's masked tokens form one tail."""
    masked = batch.noisy_masked.tolist()
    rows = batch.noisy_batch.tolist()
    out = []
    for row in sorted(set(rows)):
        flags = [m for m, r in zip(masked, rows, strict=True) if r == row]
        size = len(flags) // copies
        for c in range(copies):
            copy = flags[c * size : (c + 1) * size]
            blocks = [copy[b : b + 32] for b in range(0, size, 32)]
            out.append(all(block == sorted(block) for block in blocks))
    return out


def test_a_share_of_the_noisy_copies_is_masked_from_a_cut(engine, held_out):
    samples, pool = held_out
    processor = engine.processor
    _, row_of = _shipped_vocabulary()
    pixels = [
        preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels) for img in pool.images
    ]
    examples = train_demo.tokenise(samples[:4], processor, pixels)
    plain = train_demo.make_batch(examples, 4, np.random.default_rng(3), row_of)
    off = train_demo.make_batch(examples, 4, np.random.default_rng(3), row_of, suffix_noise=0.0)
    assert torch.equal(plain.noisy_masked, off.noisy_masked)  # 0: the same noise as a run without the option
    assert not all(_masked_tails(plain, 4))
    assert all(_masked_tails(train_demo.make_batch(examples, 4, np.random.default_rng(3), row_of, 1.0), 4))
    half = _masked_tails(train_demo.make_batch(examples, 4, np.random.default_rng(3), row_of, 0.5), 4)
    assert 0 < sum(half) < len(half)


def test_a_suffix_noise_share_outside_0_1_is_refused_before_anything_runs(tmp_path, capsys):
    from wam_diff2_ros.cli import train_demo as train_demo_cli

    with pytest.raises(SystemExit) as exited:
        train_demo_cli.main(["--out", str(tmp_path / "out"), "--suffix-noise", "1.5"])
    assert exited.value.code == 2
    assert "--suffix-noise must be in 0..1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
