"""The training model: the demo config restricted to the vocabulary in use, and the compact weights exported
from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch

from wam_diff2_ros.core.model import qwen3vl_config
from wam_diff2_ros.demo import expand as demo_files


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


def load_compact_into(model: Any, compact: dict[str, torch.Tensor], vocab_ids: Sequence[int]) -> None:
    """Copy shipped (compact) weights into a training model over `vocab_ids`, to continue training them.

    Tensors must match in shape; embedding rows are matched by token id (a token the compact weights lack keeps
    its fresh initialisation)."""
    stored_ids = compact[demo_files.VOCAB_IDS_NAME].tolist()
    rows = compact[demo_files.EMBED_ROWS_NAME]
    state = {
        name: tensor.to(torch.float32)
        for name, tensor in compact.items()
        if name not in (demo_files.VOCAB_IDS_NAME, demo_files.EMBED_ROWS_NAME)
    }
    embedding = model.state_dict()[demo_files.EMBEDDING_NAME].clone()
    position = {token: i for i, token in enumerate(vocab_ids)}
    for i, token in enumerate(stored_ids):
        if token in position:
            embedding[position[token]] = rows[i].to(torch.float32)
    state[demo_files.EMBEDDING_NAME] = embedding
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [name for name in missing if name != "lm_head.weight"]:
        raise RuntimeError(f"the weights do not fit this model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
