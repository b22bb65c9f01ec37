"""Train the embedded demo model (``wam-diff2-train-demo``): a tiny WAM-Diff2 with masked block diffusion.

Data: synthetic NAVSIM-style planning samples. Ego speed 0-20 m/s with a small lateral velocity, a constant
longitudinal acceleration, a navigation command (left / straight / right / unknown) and a front image of the
synthetic sample drive (:mod:`wam_diff2_ros.sim`) that fits the command (a frame before or in
its left turn for ``left``, the same frame mirrored for ``right``, a straight stretch for ``straight``),
rendered at one of several sizes and aspect ratios (`IMAGE_SIZES`) so that other cameras work too. The
ground truth is 8 waypoints at 0.5 .. 4.0 s from a kinematic model: the path's curvature follows the command
(``left``: ramps up to a turn whose radius is limited by a lateral-acceleration budget at the vehicle's speed
and a minimum radius, then ramps out after 60-90°, ``right`` mirrored, ``straight`` / ``unknown``: the current
curvature relaxes towards ~0), the distance along it follows the constant acceleration (stopping at 0 m/s).
The prompt is :func:`~wam_diff2_ros.core.prompts.build_planning_prompt` (``navsim`` template); the answer is
the 16 numbers with two decimals, exactly like the training data of the real model. Training and held-out
samples come from different seeds and different drives (images).

Objective: masked block diffusion, matching the decoder (:mod:`wam_diff2_ros.core.decoding`) exactly. The
response (answer tokens, then ``<|im_end|>`` filling the rest of the last block) is cut into blocks of 32.
One sequence ``[prompt | clean response | noisy response copies]`` carries everything: prompt rows are
block-causal (blocks of 32 from the prompt start), clean-response rows see the prompt and the clean blocks up
to their own (what the commit pass writes into the KV cache), and each noisy copy's block sees the prompt, the
clean blocks before it and itself (what a denoising step sees). Each noisy block draws its noise level
t ~ U(0, 1] and masks each token with probability t (mask id 151671); the loss is the cross-entropy on the
masked positions. Noisy tokens take the rope positions of their clean counterparts. The softmax runs over the
tokens that ever occur plus one constant "background" logit log(N_rest) that stands for all other tokens of
the real vocabulary: their embedding rows are exactly zero (logit 0), so this *is* the full-vocabulary
softmax, and they never get a gradient. At inference the full vocabulary is used unchanged.

Output (default: the package's ``demo/`` folder): compact float16 weights (all tensors except the
embedding, plus the non-zero embedding rows and their token ids), ``manifest.json`` (config, sizes, sha256
of the expanded float32 weights, the training command) and ``metrics.json`` (quality measured on held-out
samples through the real :class:`~wam_diff2_ros.core.engine.Engine` with the default decoding settings).
Everything follows from the seeds; with the same thread count the run is repeatable.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wam_diff2_ros.core.decoding import DecodeConfig
from wam_diff2_ros.core.model import multimodal_rope_index, qwen3vl_config
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.core.processor import IMAGE_PAD_TOKEN, ImageProcessorConfig, WamDiff2Processor, preprocess_image
from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt, format_number
from wam_diff2_ros.demo import expand as demo_files
from wam_diff2_ros.demo.tiny import (
    PREPROCESSOR_CONFIG,
    VL_CHAT_TEMPLATE,
    tiny_config,
    write_processor_files,
    write_tokenizer_files,
)

BLOCK_SIZE = 32
MASK_ID = 151671
EOS_ID = 151645
FULL_VOCAB_SIZE = 151936
NUM_WAYPOINTS = 8
WAYPOINT_DT = 0.5
COMMANDS = ("left", "straight", "right", "unknown")
COMMAND_PROBABILITIES = (0.3, 0.3, 0.3, 0.1)
MAX_SPEED = 20.0
SPEED_CAP = 22.0  # accelerating vehicles do not exceed this
# Pixel cap of the demo processor: 960x540 and 1920x1080 frames both become 480x256 -> 120 image tokens.
DEMO_PREPROCESSOR_OVERRIDES: dict[str, Any] = {"size": {"longest_edge": 131072, "shortest_edge": 12544}}
IMAGE_SIZE = (960, 540)  # the sample bag's frame size
# Frame sizes the pool cycles through, so the model is not tied to one image grid: 16:9 frames of 640x360 and
# more give the same 15x8 grid as 960x540 (120 tokens), smaller ones and other aspect ratios give others
# (320x180: 60 tokens, 424x240: 104, 800x600: 108, 640x480: 117).
IMAGE_SIZES = ((960, 540), (320, 180), (640, 480), (960, 540), (424, 240), (800, 600), (1280, 720), (640, 360))
DRIVE_SECONDS = 25.0
# Tokens every prompt / answer uses besides the ones found in the data (ChatML, vision, padding, mask, EOS).
SPECIAL_IDS = (151643, 151644, 151645, 151652, 151653, 151655, 151656, 151671)
TRAIN_SEED, HELD_OUT_SEED = 1, 2
TRAIN_DRIVE_SEEDS = tuple(range(10))  # seed 0 is the default sample bag's drive
HELD_OUT_DRIVE_SEEDS = (1000, 1001, 1002)


@dataclass(frozen=True)
class ModelSizes:
    """Layer sizes of the demo model (vocabulary and special ids are the real ones)."""

    text_hidden: int = 256
    text_layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    vision_hidden: int = 64
    vision_depth: int = 2


def demo_config(sizes: ModelSizes = ModelSizes()) -> dict[str, Any]:
    """`config.json` content of the demo model (real vocabulary and token ids, small layers)."""
    config = tiny_config(
        text_hidden=sizes.text_hidden,
        text_layers=sizes.text_layers,
        vision_hidden=sizes.vision_hidden,
        vision_depth=sizes.vision_depth,
    )
    text = config["text_config"]
    half = sizes.head_dim // 2
    text.update(
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        head_dim=sizes.head_dim,
        rope_scaling={
            "mrope_interleaved": True,
            "mrope_section": [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16],
            "rope_type": "default",
        },
    )
    config["vision_config"]["num_heads"] = max(1, sizes.vision_hidden // 32)
    return config


# --------------------------------------------------------------------------------------------------
# Synthetic NAVSIM-style samples


@dataclass(frozen=True)
class DrivingSample:
    """One planning sample: telemetry, command, the index of its image, and the ground-truth waypoints."""

    command: str
    velocity: tuple[float, float]
    acceleration: tuple[float, float]
    waypoints: tuple[tuple[float, float], ...]  # 8 (x, y), metres, ego frame, rounded like the answer
    image_index: int

    @property
    def prompt(self) -> str:
        """The NAVSIM planning prompt (``navsim`` template, one image)."""
        return build_planning_prompt(self.command, self.velocity, self.acceleration, template="navsim")

    @property
    def answer(self) -> str:
        """The answer text: 16 comma-separated numbers with two decimals."""
        return format_answer(np.asarray(self.waypoints))

    @property
    def speed(self) -> float:
        """Ego speed in m/s."""
        return math.hypot(*self.velocity)


def format_answer(waypoints: np.ndarray) -> str:
    """``x1,y1,...,x8,y8`` with two decimals, ``-0.00`` written ``0.00`` (the training data's format)."""
    return ",".join(format_number(float(v)) for v in np.asarray(waypoints, dtype=float).reshape(-1))


def travelled_distance(v0: float, accel: float, t: np.ndarray, v_cap: float = SPEED_CAP) -> np.ndarray:
    """Distance along the path after `t` seconds at constant acceleration, stopping at 0 and capped at `v_cap`."""
    t = np.asarray(t, dtype=float)
    if accel < 0.0:
        t_stop = v0 / -accel
        moving = np.minimum(t, t_stop)
        return v0 * moving + 0.5 * accel * moving**2
    if accel > 0.0 and v0 < v_cap:
        t_cap = (v_cap - v0) / accel
        ramp = np.minimum(t, t_cap)
        return v0 * ramp + 0.5 * accel * ramp**2 + v_cap * np.maximum(t - t_cap, 0.0)
    return v0 * t


def turn_knots(
    kappa0: float, kappa_turn: float, start: float, ramp: float, yaw_budget: float
) -> tuple[list[float], list[float]]:
    """Piecewise-linear curvature (s, kappa) knots of a turn (kappa_turn > 0): keep kappa0 until `start`,
    ramp to kappa_turn, hold, and ramp out over `ramp` metres once about `yaw_budget` radians are turned."""
    ramp_in = ramp * abs(kappa_turn - kappa0) / kappa_turn
    turned = kappa0 * start + 0.5 * (kappa0 + kappa_turn) * ramp_in + 0.5 * kappa_turn * ramp
    hold = max(0.0, (yaw_budget - turned) / kappa_turn)
    s = [0.0, start, start + ramp_in, start + ramp_in + hold, start + ramp_in + hold + ramp]
    k = [kappa0, kappa0, kappa_turn, kappa_turn, 0.0]
    return s, k


def path_points(knots_s: Sequence[float], knots_k: Sequence[float], distances: np.ndarray) -> np.ndarray:
    """Ego-frame (x, y) at arc lengths `distances` along a path starting at the origin heading +x whose
    curvature is piecewise linear through the knots (constant beyond them)."""
    distances = np.asarray(distances, dtype=float)
    step = 0.05
    s = np.arange(0.0, float(distances.max(initial=0.0)) + 2 * step, step)
    kappa = np.interp(s, knots_s, knots_k)
    yaw = np.concatenate([[0.0], np.cumsum((kappa[1:] + kappa[:-1]) * 0.5 * step)])
    x = np.concatenate([[0.0], np.cumsum((np.cos(yaw[1:]) + np.cos(yaw[:-1])) * 0.5 * step)])
    y = np.concatenate([[0.0], np.cumsum((np.sin(yaw[1:]) + np.sin(yaw[:-1])) * 0.5 * step)])
    return np.stack([np.interp(distances, s, x), np.interp(distances, s, y)], axis=1)


def sample_driving_sample(rng: np.random.Generator, image_choices: dict[str, Sequence[int]]) -> DrivingSample:
    """Draw one synthetic sample; `image_choices` maps each command to the image indices that fit it."""
    command = COMMANDS[int(rng.choice(len(COMMANDS), p=COMMAND_PROBABILITIES))]
    turning = command in ("left", "right")
    if rng.random() < 0.05:  # standing, about to move off (or not)
        v0, accel = 0.0, float(rng.uniform(0.0, 1.5))
    else:
        v0 = float(rng.uniform(0.0, MAX_SPEED))
        if turning and v0 > 10.0:
            accel = float(rng.uniform(-2.5, 0.5))
        elif turning:
            accel = float(rng.uniform(-1.5, 1.5))
        else:
            accel = float(rng.uniform(-2.5, 1.5))
    times = WAYPOINT_DT * np.arange(1, NUM_WAYPOINTS + 1)
    distances = travelled_distance(v0, accel, times)
    if turning:
        v_ref = max(float(distances[-1]) / float(times[-1]), 2.0)
        kappa_turn = min(1.0 / float(rng.uniform(7.0, 14.0)), float(rng.uniform(1.5, 3.0)) / v_ref**2)
        yaw_budget = float(rng.uniform(math.pi / 3, math.pi / 2))
        if rng.random() < 0.5:  # approaching the turn: it starts within the next ~1.5 s, so the command shows
            kappa0, start = float(rng.normal(0.0, 0.001)), float(rng.uniform(0.0, min(12.0, 0.4 * distances[-1])))
        else:  # already in it
            kappa0, start = kappa_turn * float(rng.uniform(0.2, 1.0)), 0.0
            yaw_budget *= float(rng.uniform(0.3, 1.0))
        knots_s, knots_k = turn_knots(kappa0, kappa_turn, start, float(rng.uniform(5.0, 10.0)), yaw_budget)
        if command == "right":
            knots_k, kappa0 = [-k for k in knots_k], -kappa0
    else:
        kappa0 = float(rng.normal(0.0, 0.002))
        knots_s, knots_k = [0.0, float(rng.uniform(10.0, 40.0))], [kappa0, float(rng.normal(0.0, 0.0008))]
    points = path_points(knots_s, knots_k, distances)
    vy = v0 * float(rng.normal(0.0, 0.005))
    vx = math.sqrt(max(v0 * v0 - vy * vy, 0.0))
    ay = v0 * v0 * kappa0 + float(rng.normal(0.0, 0.05))
    choices = image_choices[command]
    rounded = np.array([float(format_number(float(v))) for v in points.reshape(-1)]).reshape(NUM_WAYPOINTS, 2)
    return DrivingSample(
        command=command,
        velocity=(vx, vy),
        acceleration=(accel, ay),
        waypoints=tuple((float(x), float(y)) for x, y in rounded),
        image_index=int(choices[int(rng.integers(len(choices)))]),
    )


def make_samples(count: int, seed: int, image_choices: dict[str, Sequence[int]]) -> list[DrivingSample]:
    """`count` samples drawn from `seed` (the split is the seed)."""
    rng = np.random.default_rng(seed)
    samples = []
    while len(samples) < count:
        sample = sample_driving_sample(rng, image_choices)
        if parse_waypoints(sample.answer).valid:
            samples.append(sample)
    return samples


# --------------------------------------------------------------------------------------------------
# Images: frames of the synthetic sample drive that fit the command


@dataclass
class ImagePool:
    """Front images (uint8 RGB) and which of them fit each command."""

    images: list[np.ndarray]
    by_command: dict[str, list[int]]


def render_image_pool(
    drive_seeds: Sequence[int], frames_per_kind: int, seed: int, sizes: Sequence[tuple[int, int]] = IMAGE_SIZES
) -> ImagePool:
    """Render, per drive, `frames_per_kind` frames in or just before its left turn and as many on straights.

    ``left`` gets the turn frames, ``right`` the same frames mirrored, ``straight`` the straight frames and
    their mirror images, ``unknown`` any of them. Frame ``i`` of drive ``d`` has size ``sizes[(d + i) % n]``.
    """
    from wam_diff2_ros.sim import render_frames, simulate_drive

    rng = np.random.default_rng(seed)
    images: list[np.ndarray] = []
    by_command: dict[str, list[int]] = {name: [] for name in COMMANDS}
    for d, drive_seed in enumerate(drive_seeds):
        track = simulate_drive(DRIVE_SECONDS, drive_seed)
        entry = (track.turn_entry_ns - track.start_ns) / 1e9
        leave = (track.turn_exit_ns - track.start_ns) / 1e9
        turn_times = rng.uniform(entry - 2.5, leave - 1.0, frames_per_kind)
        straight_ranges = [(0.5, entry - 4.0), (leave + 3.0, DRIVE_SECONDS - 1.0)]
        straight_times = [float(rng.uniform(*straight_ranges[i % 2])) for i in range(frames_per_kind)]
        times = [*turn_times, *straight_times]
        frame_sizes = [sizes[(d + i) % len(sizes)] for i in range(len(times))]
        frames: list[np.ndarray] = [np.zeros(0, dtype=np.uint8)] * len(times)
        for size in dict.fromkeys(frame_sizes):
            members = [i for i, s in enumerate(frame_sizes) if s == size]
            for i, frame in zip(
                members, render_frames(DRIVE_SECONDS, drive_seed, *size, [times[i] for i in members]), strict=True
            ):
                frames[i] = frame
        for i, frame in enumerate(frames):
            mirrored = np.ascontiguousarray(frame[:, ::-1])
            kinds = ("left", "right") if i < frames_per_kind else ("straight", "straight")
            for kind, image in zip(kinds, (frame, mirrored), strict=True):
                by_command[kind].append(len(images))
                by_command["unknown"].append(len(images))
                images.append(image)
    return ImagePool(images, by_command)


# --------------------------------------------------------------------------------------------------
# Tokens, vocabulary, processor


def demo_processor(work_dir: Path) -> WamDiff2Processor:
    """The demo checkpoint's processor (real Qwen3 tokenizer, VL chat template, capped pixels)."""
    from transformers import AutoTokenizer

    work_dir.mkdir(parents=True, exist_ok=True)
    write_tokenizer_files(work_dir)
    write_processor_files(work_dir, DEMO_PREPROCESSOR_OVERRIDES)
    tokenizer = AutoTokenizer.from_pretrained(str(work_dir), local_files_only=True)
    image_config = ImageProcessorConfig.from_dict({**PREPROCESSOR_CONFIG, **DEMO_PREPROCESSOR_OVERRIDES})
    return WamDiff2Processor(tokenizer, VL_CHAT_TEMPLATE, image_config)


def prompt_token_ids(processor: WamDiff2Processor, prompt: str, num_image_tokens: int) -> list[int]:
    """Token ids the processor gives for `prompt` with one image of `num_image_tokens` tokens."""
    text = processor.render(build_messages(prompt, [None]))
    text = text.replace(IMAGE_PAD_TOKEN, IMAGE_PAD_TOKEN * num_image_tokens)
    return processor.tokenizer(text)["input_ids"]


def response_token_ids(processor: WamDiff2Processor, answer: str, block_size: int = BLOCK_SIZE) -> list[int]:
    """Answer tokens followed by EOS up to the end of the block holding the first EOS."""
    ids = processor.tokenizer(answer)["input_ids"]
    length = -(-(len(ids) + 1) // block_size) * block_size
    return ids + [EOS_ID] * (length - len(ids))


def vocabulary(token_lists: Sequence[Sequence[int]], processor: WamDiff2Processor) -> list[int]:
    """Sorted ids of every token in `token_lists`, the special tokens, and the tokens any planning prompt or
    answer can use (both built-in templates, every command, numbers of every sign and size)."""
    ids: set[int] = set(SPECIAL_IDS)
    for tokens in token_lists:
        ids.update(tokens)
    coverage_numbers = [(-123.45, 6.78), (9.01, -0.23), (45.67, 89.0), (-1.0, -0.5)]
    for template in ("navsim", "model_card"):
        for command in COMMANDS:
            for velocity in coverage_numbers:
                prompt = build_planning_prompt(command, velocity, velocity[::-1], template=template)
                ids.update(prompt_token_ids(processor, prompt, 1))
    ids.update(processor.tokenizer(",".join(f"{v:.2f}" for v in np.linspace(-99.99, 99.99, 37)))["input_ids"])
    return sorted(ids)


# --------------------------------------------------------------------------------------------------
# Models: the training model has only the vocabulary rows; the checkpoint has all 151936


def training_config(config: dict[str, Any], vocab_ids: Sequence[int]) -> dict[str, Any]:
    """The demo config with a vocabulary of `vocab_ids` only (special ids renumbered to their rows)."""
    row = {token: i for i, token in enumerate(vocab_ids)}
    sub = json.loads(json.dumps(config))
    sub["text_config"]["vocab_size"] = len(vocab_ids)
    for key in ("bos_token_id", "eos_token_id"):
        sub["text_config"][key] = row[sub["text_config"][key]]
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        sub[key] = row[sub[key]]
    return sub


def build_training_model(config: dict[str, Any], vocab_ids: Sequence[int], seed: int) -> Any:
    """A freshly initialised model over the vocabulary rows (initialisation deterministic in `seed`)."""
    from transformers import Qwen3VLForConditionalGeneration
    from transformers.utils import logging as hf_logging

    state = torch.random.get_rng_state()
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(qwen3vl_config(training_config(config, vocab_ids)))
    finally:
        torch.random.set_rng_state(state)
        hf_logging.set_verbosity(previous)
    return model


def restrict_vocabulary(full_model: Any, config: dict[str, Any], vocab_ids: Sequence[int]) -> Any:
    """A training model holding `full_model`'s weights with only the embedding rows `vocab_ids`."""
    model = build_training_model(config, vocab_ids, seed=0)
    state = {k: v for k, v in full_model.state_dict().items() if k != "lm_head.weight"}
    state[demo_files.EMBEDDING_NAME] = state[demo_files.EMBEDDING_NAME][torch.tensor(list(vocab_ids))]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [name for name in missing if name != "lm_head.weight"]:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.to(full_model.dtype).eval()


def compact_weights(
    model: Any, vocab_ids: Sequence[int], dtype: torch.dtype = torch.float16
) -> dict[str, torch.Tensor]:
    """The shipped form of a training model: every tensor but the embedding, the embedding rows and their ids."""
    state = {
        name: tensor.detach().to(dtype).contiguous()
        for name, tensor in model.state_dict().items()
        if name not in (demo_files.EMBEDDING_NAME, "lm_head.weight")
    }
    state[demo_files.VOCAB_IDS_NAME] = torch.tensor(list(vocab_ids), dtype=torch.int64)
    state[demo_files.EMBED_ROWS_NAME] = model.state_dict()[demo_files.EMBEDDING_NAME].detach().to(dtype).contiguous()
    return state


# --------------------------------------------------------------------------------------------------
# The block-diffusion training forward


@dataclass
class TrainingExample:
    """A tokenised sample: real token ids of prompt and response, and its image's patches."""

    prompt_ids: list[int]
    response_ids: list[int]
    pixel_values: torch.Tensor
    image_grid_thw: tuple[int, int, int]


@dataclass
class TrainingBatch:
    """Model inputs of `[prompt | clean response | noisy copies]` sequences and where the noisy tokens are."""

    input_ids: torch.Tensor  # [B, T] rows of the training vocabulary
    attention_mask: torch.Tensor  # [B, 1, T, T] bool
    position_ids: torch.Tensor  # [3, B, T]
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    noisy_batch: torch.Tensor  # [N] batch index of every noisy token
    noisy_seq: torch.Tensor  # [N] sequence index of every noisy token
    noisy_masked: torch.Tensor  # [N] bool: the token was replaced by the mask id
    targets: torch.Tensor  # [N] vocabulary row of the clean token
    noise_levels: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [N] t of the token's block


def sequence_mask(prompt_len: int, response_len: int, copies: int, block_size: int = BLOCK_SIZE) -> torch.Tensor:
    """[T, T] boolean attention of one `[prompt | clean | noisy x copies]` sequence (see the module docstring)."""
    total = prompt_len + response_len * (1 + copies)
    index = torch.arange(total)
    in_response = (index - prompt_len).clamp(min=0) % max(response_len, 1)
    kind = torch.where(index < prompt_len, 0, 1 + (index - prompt_len) // max(response_len, 1))
    block = torch.where(kind == 0, index // block_size, in_response // block_size)
    q_kind, k_kind = kind[:, None], kind[None, :]
    q_block, k_block = block[:, None], block[None, :]
    prompt_rows = (q_kind == 0) & (k_kind == 0) & (k_block <= q_block)
    clean_rows = (q_kind == 1) & ((k_kind == 0) | ((k_kind == 1) & (k_block <= q_block)))
    noisy_rows = (q_kind >= 2) & (
        (k_kind == 0) | ((k_kind == 1) & (k_block < q_block)) | ((k_kind == q_kind) & (k_block == q_block))
    )
    return prompt_rows | clean_rows | noisy_rows


def build_batch(
    examples: Sequence[TrainingExample],
    noisy: Sequence[Sequence[Sequence[int]]],
    row_of: np.ndarray,
    noise_levels: Sequence[Sequence[Sequence[float]]] | None = None,
    block_size: int = BLOCK_SIZE,
    image_token_id: int = 151655,
    vision_start_token_id: int = 151652,
    spatial_merge_size: int = 2,
) -> TrainingBatch:
    """Lay out examples with their noisy response copies (`noisy[i][c]`, real ids, mask id where masked).

    `row_of` maps a real token id to its training-vocabulary row (-1: not in the vocabulary). Sequences are
    right-padded; padding rows attend to themselves only and nothing attends to them.
    """
    lengths = [
        len(e.prompt_ids) + len(e.response_ids) * (1 + len(copies)) for e, copies in zip(examples, noisy, strict=True)
    ]
    total = max(lengths)
    batch = len(examples)
    ids = torch.zeros(batch, total, dtype=torch.long)
    mask = torch.eye(total, dtype=torch.bool).expand(batch, 1, total, total).clone()
    positions = torch.zeros(3, batch, total, dtype=torch.long)
    noisy_b, noisy_s, noisy_m, targets, levels = [], [], [], [], []
    for i, (example, copies) in enumerate(zip(examples, noisy, strict=True)):
        prompt = torch.tensor(example.prompt_ids, dtype=torch.long)[None]
        prompt_len, response_len = prompt.shape[1], len(example.response_ids)
        prompt_pos, delta = multimodal_rope_index(
            prompt,
            torch.ones_like(prompt),
            torch.tensor([example.image_grid_thw]),
            image_token_id=image_token_id,
            vision_start_token_id=vision_start_token_id,
            spatial_merge_size=spatial_merge_size,
        )
        response_pos = torch.arange(prompt_len, prompt_len + response_len) + int(delta[0, 0])
        sequence = list(example.prompt_ids) + list(example.response_ids)
        for c, copy in enumerate(copies):
            if len(copy) != response_len:
                raise ValueError(f"noisy copy {c} of example {i} has {len(copy)} tokens, the response {response_len}")
            start = len(sequence)
            sequence.extend(copy)
            for j, token in enumerate(copy):
                noisy_b.append(i)
                noisy_s.append(start + j)
                noisy_m.append(token == MASK_ID)
                targets.append(example.response_ids[j])
                levels.append(noise_levels[i][c][j // block_size] if noise_levels is not None else 0.0)
        rows = row_of[np.asarray(sequence)]
        if (rows < 0).any():
            unknown = sorted({tok for tok, r in zip(sequence, rows, strict=True) if r < 0})
            raise ValueError(f"tokens outside the training vocabulary: {unknown[:10]}")
        length = lengths[i]
        ids[i, :length] = torch.from_numpy(rows.astype(np.int64))
        mask[i, 0, :length, :length] = sequence_mask(prompt_len, response_len, len(copies), block_size)
        positions[:, i, :prompt_len] = prompt_pos[:, 0]
        positions[:, i, prompt_len:length] = response_pos.repeat(1 + len(copies))
    target_rows = torch.from_numpy(row_of[np.asarray(targets, dtype=np.int64)].astype(np.int64))
    return TrainingBatch(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        pixel_values=torch.cat([e.pixel_values for e in examples]),
        image_grid_thw=torch.tensor([e.image_grid_thw for e in examples], dtype=torch.long),
        noisy_batch=torch.tensor(noisy_b, dtype=torch.long),
        noisy_seq=torch.tensor(noisy_s, dtype=torch.long),
        noisy_masked=torch.tensor(noisy_m, dtype=torch.bool),
        targets=target_rows,
        noise_levels=torch.tensor(levels, dtype=torch.float32),
    )


def noisy_logits(model: Any, batch: TrainingBatch, only_masked: bool = False) -> torch.Tensor:
    """Training-vocabulary logits at the noisy positions ([N, V], or only the masked ones)."""
    output = model.model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        pixel_values=batch.pixel_values,
        image_grid_thw=batch.image_grid_thw,
        use_cache=False,
    )
    select = batch.noisy_masked if only_masked else slice(None)
    hidden = output.last_hidden_state[batch.noisy_batch[select], batch.noisy_seq[select]]
    return model.lm_head(hidden)


def with_background(logits: torch.Tensor, full_vocab_size: int = FULL_VOCAB_SIZE) -> torch.Tensor:
    """Append the logit log(N_rest) that stands for the N_rest zero-embedding tokens (each of logit 0)."""
    rest = full_vocab_size - logits.shape[-1]
    background = torch.full((*logits.shape[:-1], 1), math.log(rest), dtype=logits.dtype, device=logits.device)
    return torch.cat([logits, background], dim=-1)


def diffusion_loss(model: Any, batch: TrainingBatch) -> torch.Tensor:
    """Mean cross-entropy (full-vocabulary softmax) over the masked noisy positions."""
    logits = with_background(noisy_logits(model, batch, only_masked=True))
    return torch.nn.functional.cross_entropy(logits, batch.targets[batch.noisy_masked])


def noise_response(
    response: Sequence[int], rng: np.random.Generator, block_size: int = BLOCK_SIZE
) -> tuple[list[int], list[float]]:
    """A noisy copy: per block t ~ U(0, 1], each token masked with probability t. Returns (tokens, t per block)."""
    tokens, levels = list(response), []
    for start in range(0, len(tokens), block_size):
        t = 1.0 - float(rng.random())
        levels.append(t)
        drawn = rng.random(block_size)
        for j in range(block_size):
            if drawn[j] < t:
                tokens[start + j] = MASK_ID
    return tokens, levels


# --------------------------------------------------------------------------------------------------
# Evaluation through the real decoder


def path_length(points: np.ndarray) -> float:
    """Length of the polyline origin -> waypoints."""
    pts = np.vstack([[0.0, 0.0], np.asarray(points, dtype=float).reshape(-1, 2)])
    return float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum())


def evaluate(
    engine: Any,
    samples: Sequence[DrivingSample],
    images: Sequence[np.ndarray],
    decode: DecodeConfig | None = None,
) -> dict[str, Any]:
    """Decode every sample with `engine` and measure validity, ADE/FDE, steps per block, latency, behaviour."""
    decode = decode or DecodeConfig()
    rows = []
    for sample in samples:
        result = engine.generate(sample.prompt, [images[sample.image_index]], decode)
        parsed = parse_waypoints(result.text)
        row: dict[str, Any] = {
            "command": sample.command,
            "speed": sample.speed,
            "valid": parsed.valid,
            "latency_s": result.timing.total_s,
            "steps": list(result.steps_per_block),
            "gt_length": path_length(np.asarray(sample.waypoints)),
            "gt_final_y": sample.waypoints[-1][1],
            "num_prompt_tokens": result.num_prompt_tokens,
            "image_size": "x".join(str(n) for n in images[sample.image_index].shape[1::-1]),
        }
        if parsed.valid:
            pred = np.array([[w.x, w.y] for w in parsed.waypoints])
            errors = np.linalg.norm(pred - np.asarray(sample.waypoints), axis=1)
            row.update(
                ade=float(errors.mean()), fde=float(errors[-1]), length=path_length(pred), final_y=float(pred[-1, 1])
            )
        rows.append(row)
    valid = [r for r in rows if r["valid"]]
    steps = [s for r in rows for s in r["steps"]]
    latencies = sorted(r["latency_s"] for r in rows)
    bins = [(0.0, 5.0), (5.0, 10.0), (10.0, 15.0), (15.0, 20.1)]
    length_by_speed = []
    for lo, hi in bins:
        members = [r for r in valid if lo <= r["speed"] < hi]
        length_by_speed.append(
            {
                "speed_m_s": [lo, min(hi, MAX_SPEED)],
                "count": len(members),
                "median_length_m": statistics.median([r["length"] for r in members]) if members else None,
                "median_gt_length_m": statistics.median([r["gt_length"] for r in members]) if members else None,
            }
        )
    final_y = {}
    for command in COMMANDS:
        members = [r for r in valid if r["command"] == command]
        final_y[command] = {
            "count": len(members),
            "mean_final_y_m": statistics.fmean([r["final_y"] for r in members]) if members else None,
            "mean_gt_final_y_m": statistics.fmean([r["gt_final_y"] for r in members]) if members else None,
        }
    medians = [b["median_length_m"] for b in length_by_speed if b["median_length_m"] is not None]
    by_size = {}
    for size in sorted({r["image_size"] for r in rows}):
        members = [r for r in rows if r["image_size"] == size]
        by_size[size] = {"count": len(members), "valid_rate": sum(r["valid"] for r in members) / len(members)}

    def mean_of(key: str) -> float | None:
        return statistics.fmean([r[key] for r in valid]) if valid else None

    left, right, straight = (final_y[c]["mean_final_y_m"] for c in ("left", "right", "straight"))
    return {
        "samples": len(rows),
        "valid_rate": len(valid) / len(rows) if rows else 0.0,
        "ade_m": mean_of("ade"),
        "fde_m": mean_of("fde"),
        "median_ade_m": statistics.median([r["ade"] for r in valid]) if valid else None,
        "mean_steps_per_block": statistics.fmean(steps) if steps else None,
        "mean_blocks": statistics.fmean([len(r["steps"]) for r in rows]) if rows else None,
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "latency_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "latency_p90_s": latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))] if latencies else None,
        "prompt_tokens": rows[0]["num_prompt_tokens"] if rows else None,
        "path_length_by_speed": length_by_speed,
        "final_y_by_command": final_y,
        "valid_rate_by_image_size": by_size,
        "checks": {
            "length_grows_with_speed": len(medians) == len(bins) and all(a < b for a, b in itertools.pairwise(medians)),
            "left_final_y_positive": left is not None and left > 0.0,
            "right_final_y_negative": right is not None and right < 0.0,
            "straight_final_y_near_zero": straight is not None and abs(straight) < 1.0,
        },
    }


# --------------------------------------------------------------------------------------------------
# Training


@dataclass
class TrainSettings:
    """What a training run does (everything else follows from the seeds)."""

    train_samples: int = 12000
    epochs: int = 3
    batch_size: int = 8
    noisy_copies: int = 2
    lr: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    eval_samples: int = 200
    frames_per_kind: int = 4
    train_drives: int = len(TRAIN_DRIVE_SEEDS)
    threads: int = 2
    init_seed: int = 0
    probe_every: int = 500  # steps between quick decoder probes (0: none)
    probe_samples: int = 16
    sizes: ModelSizes = field(default_factory=ModelSizes)


def _log(message: str) -> None:
    print(message, flush=True)


def _tokenise(
    samples: Sequence[DrivingSample], processor: WamDiff2Processor, pixels: Sequence[Any]
) -> list[TrainingExample]:
    examples = []
    for sample in samples:
        image = pixels[sample.image_index]
        examples.append(
            TrainingExample(
                prompt_ids=prompt_token_ids(processor, sample.prompt, image.num_tokens),
                response_ids=response_token_ids(processor, sample.answer),
                pixel_values=image.pixel_values,
                image_grid_thw=image.grid_thw,
            )
        )
    return examples


def _make_batch(
    examples: Sequence[TrainingExample], copies: int, rng: np.random.Generator, row_of: np.ndarray
) -> TrainingBatch:
    noisy, levels = [], []
    for example in examples:
        drawn = [noise_response(example.response_ids, rng) for _ in range(copies)]
        noisy.append([tokens for tokens, _ in drawn])
        levels.append([t for _, t in drawn])
    return build_batch(examples, noisy, row_of, levels)


def export_demo(
    model: Any, vocab_ids: Sequence[int], config: dict[str, Any], out_dir: Path, training: dict[str, Any]
) -> dict[str, Any]:
    """Write the shipped files (compact weights + manifest) of a training model into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    compact_path = out_dir / demo_files.COMPACT_WEIGHTS
    demo_files.write_safetensors(compact_weights(model, vocab_ids), compact_path)
    with tempfile.TemporaryDirectory(prefix="wam_diff2_expand_") as tmp:
        expanded = Path(tmp) / "model.safetensors"
        state = demo_files.expand_state(demo_files.read_safetensors(compact_path), FULL_VOCAB_SIZE)
        demo_files.write_safetensors(state, expanded)
        expanded_sha, expanded_bytes = demo_files.sha256_file(expanded), expanded.stat().st_size
    trained = sum(p.numel() for p in model.parameters())
    hidden = config["text_config"]["hidden_size"]
    manifest = {
        "format": demo_files.FORMAT_VERSION,
        "description": "tiny WAM-Diff2 trained with masked block diffusion on synthetic NAVSIM-style samples",
        "config": config,
        "preprocessor_overrides": DEMO_PREPROCESSOR_OVERRIDES,
        "vocab_size": FULL_VOCAB_SIZE,
        "stored_vocab_rows": len(vocab_ids),
        "stored_dtype": "float16",
        "parameters": trained + (FULL_VOCAB_SIZE - len(vocab_ids)) * hidden,
        "trained_parameters": trained,
        "compact_sha256": demo_files.sha256_file(compact_path),
        "compact_bytes": compact_path.stat().st_size,
        "model_safetensors_sha256": expanded_sha,
        "model_safetensors_bytes": expanded_bytes,
        "training": training,
    }
    (out_dir / demo_files.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _load_engine(demo_dir: Path, cache_dir: Path) -> Any:
    from wam_diff2_ros.core.engine import Engine

    return Engine.load(demo_files.demo_checkpoint(cache_dir=cache_dir, demo_dir=demo_dir), "cpu", "float32")


def train(settings: TrainSettings, out_dir: Path, command_line: str) -> dict[str, Any]:
    """Train, write the shipped files into `out_dir`, evaluate them through the engine; returns the metrics."""
    torch.set_num_threads(settings.threads)
    torch.set_flush_denormal(True)
    started = time.perf_counter()
    config = demo_config(settings.sizes)
    with tempfile.TemporaryDirectory(prefix="wam_diff2_demo_") as tmp:
        work = Path(tmp)
        processor = demo_processor(work / "processor")
        _log(f"rendering training images ({settings.train_drives} drives) and held-out images ...")
        train_pool = render_image_pool(
            TRAIN_DRIVE_SEEDS[: settings.train_drives], settings.frames_per_kind, seed=TRAIN_SEED
        )
        held_pool = render_image_pool(HELD_OUT_DRIVE_SEEDS, settings.frames_per_kind, seed=HELD_OUT_SEED)
        train_pixels = [
            preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels)
            for img in train_pool.images
        ]
        held_pixels = [
            preprocess_image(img, processor.image_config, processor.min_pixels, processor.max_pixels)
            for img in held_pool.images
        ]
        train_samples = make_samples(settings.train_samples, TRAIN_SEED, train_pool.by_command)
        held_samples = make_samples(max(settings.eval_samples, 64), HELD_OUT_SEED, held_pool.by_command)
        train_examples = _tokenise(train_samples, processor, train_pixels)
        held_examples = _tokenise(held_samples[:64], processor, held_pixels)
        vocab_ids = vocabulary([e.prompt_ids + e.response_ids for e in train_examples + held_examples], processor)
        row_of = np.full(FULL_VOCAB_SIZE, -1, dtype=np.int64)
        row_of[np.asarray(vocab_ids)] = np.arange(len(vocab_ids))
        response_blocks = [len(e.response_ids) // BLOCK_SIZE for e in train_examples]
        prompt_lengths = [len(e.prompt_ids) for e in train_examples]
        _log(
            f"{len(train_examples)} training / {len(held_samples)} held-out samples, {len(train_pool.images)} + "
            f"{len(held_pool.images)} images, vocabulary {len(vocab_ids)} tokens, prompt "
            f"{min(prompt_lengths)}-{max(prompt_lengths)} tokens, response blocks "
            f"{min(response_blocks)}-{max(response_blocks)} ({time.perf_counter() - started:.0f} s)"
        )

        model = build_training_model(config, vocab_ids, settings.init_seed).train()
        parameters = sum(p.numel() for p in model.parameters())
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
        no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=settings.lr,
            betas=(0.9, 0.98),
        )
        steps_per_epoch = len(train_examples) // settings.batch_size
        total_steps = steps_per_epoch * settings.epochs

        def lr_at(step: int) -> float:
            if step < settings.warmup_steps:
                return settings.lr * (step + 1) / settings.warmup_steps
            progress = (step - settings.warmup_steps) / max(1, total_steps - settings.warmup_steps)
            return settings.lr * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * progress)))

        def probe(label: str) -> dict[str, Any]:
            """Validity and ADE of the current weights on a few held-out prompts, through the real engine."""
            probe_dir = work / f"probe-{label}"
            export_demo(model, vocab_ids, config, probe_dir, {"probe": label})
            engine = _load_engine(probe_dir, work / "probe-cache")
            result = evaluate(engine, held_samples[: settings.probe_samples], held_pool.images)
            engine.close()
            shutil.rmtree(work / "probe-cache", ignore_errors=True)
            shutil.rmtree(probe_dir, ignore_errors=True)
            ade = "-" if result["ade_m"] is None else f"{result['ade_m']:.2f} m"
            _log(
                f"  probe {label}: valid {result['valid_rate']:.2f}, ADE {ade}, "
                f"steps/block {result['mean_steps_per_block']:.1f} on {result['samples']} held-out prompts"
            )
            return {"at": label, "valid_rate": result["valid_rate"], "ade_m": result["ade_m"]}

        held_rng = np.random.default_rng(HELD_OUT_SEED + 100)
        held_batches = [
            _make_batch(held_examples[i : i + settings.batch_size], settings.noisy_copies, held_rng, row_of)
            for i in range(0, len(held_examples), settings.batch_size)
        ]
        rng = np.random.default_rng(TRAIN_SEED + 100)
        epochs_log, probes = [], []
        step = 0
        train_started = time.perf_counter()
        probe_seconds = 0.0
        _log(f"model: {parameters / 1e6:.2f} M trainable parameters; {total_steps} steps")
        for epoch in range(settings.epochs):
            order = rng.permutation(len(train_examples))
            losses = []
            for index in range(steps_per_epoch):
                model.train()
                chosen = [
                    train_examples[k] for k in order[index * settings.batch_size : (index + 1) * settings.batch_size]
                ]
                batch = _make_batch(chosen, settings.noisy_copies, rng, row_of)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step)
                loss = diffusion_loss(model, batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                losses.append(loss.item())
                step += 1
                if step % 100 == 0:
                    elapsed = time.perf_counter() - train_started - probe_seconds
                    _log(f"  step {step}/{total_steps} loss {statistics.fmean(losses[-100:]):.4f} ({elapsed:.0f} s)")
                if settings.probe_every and step % settings.probe_every == 0 and step < total_steps:
                    probe_started = time.perf_counter()
                    model.eval()
                    probes.append(probe(f"step {step}"))
                    probe_seconds += time.perf_counter() - probe_started
            model.eval()
            with torch.no_grad():
                held_loss = statistics.fmean(diffusion_loss(model, b).item() for b in held_batches)
            entry = {
                "epoch": epoch + 1,
                "train_loss": statistics.fmean(losses),
                "held_out_loss": held_loss,
                "elapsed_s": round(time.perf_counter() - train_started - probe_seconds, 1),
            }
            epochs_log.append(entry)
            _log(
                f"epoch {epoch + 1}: train loss {entry['train_loss']:.4f}, held-out loss {held_loss:.4f} "
                f"({entry['elapsed_s']:.0f} s)"
            )
        train_seconds = time.perf_counter() - train_started - probe_seconds

        training = {
            "command": command_line,
            "settings": asdict(settings),
            "wall_s": round(train_seconds, 1),
            "steps": total_steps,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cpu_threads": settings.threads,
        }
        manifest = export_demo(model, vocab_ids, config, out_dir, training)
        _log(f"evaluating {settings.eval_samples} held-out samples through the engine ...")
        engine = _load_engine(out_dir, work / "cache")
        quality = evaluate(engine, held_samples[: settings.eval_samples], held_pool.images)
        sweeps = behaviour_sweeps(engine, held_pool)
        engine.close()
    metrics = {
        "held_out": quality,
        "sweeps": sweeps,
        "epochs": epochs_log,
        "probes": probes,
        "training_wall_s": round(train_seconds, 1),
        "total_wall_s": round(time.perf_counter() - started, 1),
        "model": {
            "parameters": manifest["parameters"],
            "trained_parameters": parameters,
            "sizes": asdict(settings.sizes),
            "shipped_bytes": manifest["compact_bytes"],
            "expanded_bytes": manifest["model_safetensors_bytes"],
        },
        "decode": asdict(DecodeConfig()),
        "device": "cpu float32",
        "cpu_threads": settings.threads,
    }
    (out_dir / demo_files.METRICS).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics


SWEEP_SPEEDS = (2.0, 6.0, 10.0, 14.0, 18.0)


def behaviour_sweeps(engine: Any, pool: ImagePool, decode: DecodeConfig | None = None) -> dict[str, Any]:
    """Prompts that differ in one thing only: speed (straight, no acceleration) and command (at 8 m/s)."""
    straight_image = pool.images[pool.by_command["straight"][0]]
    lengths = []
    for speed in SWEEP_SPEEDS:
        result = engine.generate(build_planning_prompt("straight", (speed, 0.0), (0.0, 0.0)), [straight_image], decode)
        parsed = parse_waypoints(result.text)
        lengths.append(path_length(np.array([[w.x, w.y] for w in parsed.waypoints])) if parsed.valid else None)
    final_y = {}
    for command in ("left", "straight", "right"):
        image = pool.images[pool.by_command[command][0]]
        result = engine.generate(build_planning_prompt(command, (8.0, 0.0), (0.0, 0.0)), [image], decode)
        parsed = parse_waypoints(result.text)
        final_y[command] = parsed.waypoints[-1].y if parsed.valid else None
    return {"speeds_m_s": list(SWEEP_SPEEDS), "path_length_m": lengths, "final_y_m_at_8_m_s": final_y}


def print_report(metrics: dict[str, Any]) -> None:
    """Print the measured quality (what README quotes)."""
    q = metrics["held_out"]
    _log("held-out quality (real decoder, block 32, dynamic 0.9, 32 steps, CPU float32):")
    _log(f"  valid-answer rate {q['valid_rate']:.3f} on {q['samples']} samples")
    _log(
        f"  ADE {q['ade_m']:.2f} m, FDE {q['fde_m']:.2f} m (median ADE {q['median_ade_m']:.2f} m)"
        if q["ade_m"] is not None
        else "  no valid answers"
    )
    _log(f"  mean steps per block {q['mean_steps_per_block']:.2f}, blocks {q['mean_blocks']:.2f}")
    _log(
        f"  latency mean {q['latency_mean_s']:.3f} s, p50 {q['latency_p50_s']:.3f} s, "
        f"p90 {q['latency_p90_s']:.3f} s ({q['prompt_tokens']} prompt tokens)"
    )
    for b in q["path_length_by_speed"]:
        _log(
            f"  speed {b['speed_m_s'][0]:.0f}-{b['speed_m_s'][1]:.0f} m/s: median path {b['median_length_m']:.2f} m "
            f"(truth {b['median_gt_length_m']:.2f} m, n={b['count']})"
        )
    for command, entry in q["final_y_by_command"].items():
        _log(
            f"  {command}: mean final y {entry['mean_final_y_m']:.2f} m "
            f"(truth {entry['mean_gt_final_y_m']:.2f} m, n={entry['count']})"
        )
    _log(f"  checks: {q['checks']}")
    _log(f"  sweeps: {metrics['sweeps']}")
    _log(
        f"training {metrics['training_wall_s']:.0f} s, total {metrics['total_wall_s']:.0f} s; "
        f"shipped {metrics['model']['shipped_bytes'] / 1e6:.2f} MB"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``wam-diff2-train-demo [--out DIR] [--epochs N] ...``: train the demo model and write its files."""
    defaults = TrainSettings()
    parser = argparse.ArgumentParser(prog="wam-diff2-train-demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=demo_files.DEMO_DIR, help="output folder (default: the package's demo/)"
    )
    parser.add_argument("--train-samples", type=int, default=defaults.train_samples)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument(
        "--noisy-copies", type=int, default=defaults.noisy_copies, help="noisy response copies per sequence"
    )
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--eval-samples", type=int, default=defaults.eval_samples)
    parser.add_argument(
        "--frames-per-kind", type=int, default=defaults.frames_per_kind, help="turn / straight frames per drive"
    )
    parser.add_argument(
        "--train-drives",
        type=int,
        default=defaults.train_drives,
        help=f"drives rendered for training (<= {len(TRAIN_DRIVE_SEEDS)})",
    )
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--probe-every", type=int, default=defaults.probe_every, help="steps between decoder probes")
    parser.add_argument("--text-hidden", type=int, default=defaults.sizes.text_hidden)
    parser.add_argument("--text-layers", type=int, default=defaults.sizes.text_layers)
    args = parser.parse_args(argv)
    checks = [
        (args.train_samples >= args.batch_size >= 1, "--train-samples must be >= --batch-size >= 1"),
        (args.epochs >= 1, "--epochs must be >= 1"),
        (args.noisy_copies >= 1, "--noisy-copies must be >= 1"),
        (args.lr > 0, "--lr must be > 0"),
        (args.eval_samples >= 1, "--eval-samples must be >= 1"),
        (args.frames_per_kind >= 1, "--frames-per-kind must be >= 1"),
        (1 <= args.train_drives <= len(TRAIN_DRIVE_SEEDS), f"--train-drives must be 1..{len(TRAIN_DRIVE_SEEDS)}"),
        (args.threads >= 1, "--threads must be >= 1"),
        (args.probe_every >= 0, "--probe-every must be >= 0"),
        (args.text_hidden >= 32 and args.text_hidden % 32 == 0, "--text-hidden must be a multiple of 32"),
        (args.text_layers >= 1, "--text-layers must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    settings = TrainSettings(
        train_samples=args.train_samples,
        epochs=args.epochs,
        batch_size=args.batch_size,
        noisy_copies=args.noisy_copies,
        lr=args.lr,
        eval_samples=args.eval_samples,
        frames_per_kind=args.frames_per_kind,
        train_drives=args.train_drives,
        threads=args.threads,
        probe_every=args.probe_every,
        sizes=ModelSizes(text_hidden=args.text_hidden, text_layers=args.text_layers),
    )
    command_line = shlex.join(["wam-diff2-train-demo", *(sys.argv[1:] if argv is None else argv)])
    metrics = train(settings, args.out, command_line)
    print_report(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
