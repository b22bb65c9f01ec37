"""The masked block-diffusion objective, matching the decoder exactly: one sequence with the prompt, the
clean response and noisy response copies; block masks; the loss on masked positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from wam_diff2_ros.core.image_preprocess import pixel_values
from wam_diff2_ros.core.model import multimodal_rope_index
from wam_diff2_ros.core.tokens import IMAGE_TOKEN_ID, VISION_START_TOKEN_ID
from wam_diff2_ros.demo.train.config import BLOCK_SIZE, FULL_VOCAB_SIZE, MASK_ID
from wam_diff2_ros.demo.train.tokens import demo_image_config


@dataclass
class TrainingExample:
    """A tokenised sample: real token ids of prompt and response, and its image: the vision encoder's float32
    input, or the processor's uint8 patches (turned into that input per batch, so that thousands of training
    images cost an eighth of the memory)."""

    prompt_ids: list[int]
    response_ids: list[int]
    pixel_values: torch.Tensor
    image_grid_thw: tuple[int, int, int]
    response_weights: list[float] | None = None  # loss weight per response token (None: all 1)


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
    target_weights: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [N] loss weights (empty: all 1)


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


def _encoder_input(values: torch.Tensor) -> torch.Tensor:
    return pixel_values(values, demo_image_config()) if values.dtype == torch.uint8 else values


def build_batch(
    examples: Sequence[TrainingExample],
    noisy: Sequence[Sequence[Sequence[int]]],
    row_of: np.ndarray,
    noise_levels: Sequence[Sequence[Sequence[float]]] | None = None,
    block_size: int = BLOCK_SIZE,
    image_token_id: int = IMAGE_TOKEN_ID,
    vision_start_token_id: int = VISION_START_TOKEN_ID,
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
    noisy_b, noisy_s, noisy_m, targets, levels, weights = [], [], [], [], [], []
    weighted = any(e.response_weights is not None for e in examples)
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
        token_weights = example.response_weights or [1.0] * response_len
        if len(token_weights) != response_len:
            raise ValueError(f"example {i} has {len(token_weights)} response weights for {response_len} tokens")
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
                weights.append(token_weights[j])
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
        pixel_values=torch.cat([_encoder_input(e.pixel_values) for e in examples]),
        image_grid_thw=torch.tensor([e.image_grid_thw for e in examples], dtype=torch.long),
        noisy_batch=torch.tensor(noisy_b, dtype=torch.long),
        noisy_seq=torch.tensor(noisy_s, dtype=torch.long),
        noisy_masked=torch.tensor(noisy_m, dtype=torch.bool),
        targets=target_rows,
        noise_levels=torch.tensor(levels, dtype=torch.float32),
        target_weights=torch.tensor(weights, dtype=torch.float32) if weighted else torch.zeros(0),
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
    """Mean cross-entropy (full-vocabulary softmax) over the masked noisy positions, weighted by the batch's
    target weights when it has them (a weighted mean: the weights set shares, not the scale)."""
    logits = with_background(noisy_logits(model, batch, only_masked=True))
    targets = batch.targets[batch.noisy_masked]
    if batch.target_weights.numel() == 0:
        return torch.nn.functional.cross_entropy(logits, targets)
    weights = batch.target_weights[batch.noisy_masked]
    per_token = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    return (per_token * weights).sum() / weights.sum().clamp(min=1e-12)


def digit_place_weights(token_texts: Sequence[str], weights: Sequence[float]) -> list[float]:
    """Loss weight of each token of an answer, by what it writes: ``weights[0]`` for a digit before a decimal
    point, ``weights[1]`` / ``weights[2]`` for the first / second digit after it (later digits: the last one),
    1 for everything else (separators, signs, the point, EOS). Tokens are single characters or other text."""
    if len(weights) != 3:
        raise ValueError(f"need 3 digit-place weights (integer, tenths, hundredths), got {len(weights)}")
    out: list[float] = []
    after_point: int | None = None  # digits written since the decimal point of the current number
    for text in token_texts:
        if text.isdigit() and len(text) == 1:
            if after_point is None:
                out.append(float(weights[0]))
            else:
                after_point += 1
                out.append(float(weights[min(after_point, 2)]))
        else:
            after_point = 0 if text == "." else None
            out.append(1.0)
    return out


def noise_response(
    response: Sequence[int], rng: np.random.Generator, block_size: int = BLOCK_SIZE, suffix: bool = False
) -> tuple[list[int], list[float]]:
    """A noisy copy: per block t ~ U(0, 1], each token masked with probability t. With `suffix`, per block every
    token from a cut drawn uniformly in [0, block) on is masked instead (t: the masked share), the state a block
    is in when its earlier tokens are written first. Returns (tokens, t per block)."""
    tokens, levels = list(response), []
    for start in range(0, len(tokens), block_size):
        length = min(block_size, len(tokens) - start)  # a shorter last block keeps its length
        if suffix:
            cut = int(rng.integers(0, length))
            levels.append((length - cut) / length)
            tokens[start + cut : start + length] = [MASK_ID] * (length - cut)
        else:
            t = 1.0 - float(rng.random())
            levels.append(t)
            drawn = rng.random(length)
            for j in range(length):
                if drawn[j] < t:
                    tokens[start + j] = MASK_ID
    return tokens, levels
