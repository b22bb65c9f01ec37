"""WAM-Diff2 = transformers' Qwen3-VL modules driven with explicit block masks instead of a causal mask.

WAM-Diff2's only architectural change from Qwen3-VL is attention: no causal mask; the decoder passes
block-causal 4-D boolean masks. transformers' Qwen3-VL attention uses a 4-D mask as given, so the stock
modules are used unchanged; this module maps the checkpoint config onto them, computes the multimodal rope
index the way the reference does, and exposes the three forward passes the decoder needs (prefill, a
denoising step that leaves the KV cache unchanged, a commit that appends a finished block). It papers over
the API differences between transformers 4.57 and 5.x (cache keyword, output fields). `step_hidden` and
`output_logits` split a step for the fast engine (core/engine/fast.py).
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .tokens import BOS_TOKEN_ID, EOS_TOKEN_ID, SPECIAL_TOKEN_IDS

WAM_DIFF2_MODEL_TYPE = "wam_diff2"

# Architecture of WAM-Diff2-B32-2B (= Qwen3-VL-2B), written out because transformers' Qwen3-VL defaults
# describe the 4B/8B model. 2,127,532,032 parameters.
QWEN3_VL_2B_TEXT_CONFIG: dict[str, Any] = {
    "model_type": "wam_diff2_text",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": BOS_TOKEN_ID,
    "eos_token_id": EOS_TOKEN_ID,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 262144,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
    "rope_theta": 5000000,
    "tie_word_embeddings": True,
    "use_cache": True,
    "vocab_size": 151936,
}
QWEN3_VL_2B_VISION_CONFIG: dict[str, Any] = {
    "model_type": "wam_diff2",
    "deepstack_visual_indexes": [5, 11, 17],
    "depth": 24,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1024,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "out_hidden_size": 2048,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


def wam_diff2_2b_config() -> dict[str, Any]:
    """The `config.json` content of a WAM-Diff2-B32-2B checkpoint (architecture only)."""
    return {
        "architectures": ["WAMDiff2ForConditionalGeneration"],
        "model_type": WAM_DIFF2_MODEL_TYPE,
        "text_config": dict(QWEN3_VL_2B_TEXT_CONFIG),
        "vision_config": dict(QWEN3_VL_2B_VISION_CONFIG),
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        **SPECIAL_TOKEN_IDS,
    }


_NOT_FORWARDED = {"model_type", "architectures", "transformers_version", "auto_map", "_name_or_path"}


def qwen3vl_config(checkpoint_config: dict[str, Any]) -> Any:
    """transformers `Qwen3VLConfig` for a WAM-Diff2 `config.json` dict (sub-configs copied key by key)."""
    from transformers import Qwen3VLConfig

    checkpoint_config = copy.deepcopy(checkpoint_config)  # transformers 5 edits rope dicts in place
    text = {k: v for k, v in checkpoint_config["text_config"].items() if k not in _NOT_FORWARDED}
    vision = {k: v for k, v in checkpoint_config["vision_config"].items() if k not in _NOT_FORWARDED}
    top = {
        k: v
        for k, v in checkpoint_config.items()
        if k not in _NOT_FORWARDED and k not in ("text_config", "vision_config", "torch_dtype", "dtype")
    }
    top.setdefault("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return Qwen3VLConfig(text_config=text, vision_config=vision, **top)


def multimodal_rope_index(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    image_grid_thw: torch.Tensor | None,
    *,
    image_token_id: int,
    vision_start_token_id: int,
    spatial_merge_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """3-D (t, h, w) rope positions of a prompt batch and the per-sample offset for later positions.

    Same result as the reference `get_rope_index` (images only): text tokens count up on all three axes,
    an image's tokens take (0, row, col) offsets from the text position before it, and the text after
    an image continues at one past the largest position used. Padding positions are set to 1. The
    returned delta (shape [B, 1]) makes `index + delta` the position of sequence index `index` >= P.
    """
    batch, length = input_ids.shape
    device = input_ids.device
    valid = attention_mask.to(device) == 1
    if image_grid_thw is None:
        positions = attention_mask.long().cumsum(-1) - 1
        positions.masked_fill_(attention_mask == 0, 1)
        positions = positions.unsqueeze(0).expand(3, -1, -1).to(device)
        deltas = positions.max(0)[0].max(-1, keepdim=True)[0] + 1 - length
        return positions, deltas

    positions = torch.ones(3, batch, length, dtype=input_ids.dtype, device=device)
    grids = image_grid_thw.tolist()
    next_image = 0
    deltas: list[int] = []
    for row in range(batch):
        tokens = input_ids[row][valid[row]].tolist()
        starts = [i for i, tok in enumerate(tokens[:-1]) if tok == vision_start_token_id]
        num_images = sum(1 for i in starts if tokens[i + 1] == image_token_id)
        pieces: list[torch.Tensor] = []
        cursor = 0  # index into tokens
        offset = 0  # next free position
        for _ in range(num_images):
            image_at = tokens.index(image_token_id, cursor)
            t, h, w = grids[next_image]
            next_image += 1
            grid_t, grid_h, grid_w = t, h // spatial_merge_size, w // spatial_merge_size
            text_len = image_at - cursor
            pieces.append(torch.arange(text_len).view(1, -1).expand(3, -1) + offset)
            t_idx = torch.arange(grid_t).view(-1, 1).expand(-1, grid_h * grid_w).flatten()
            h_idx = torch.arange(grid_h).view(1, -1, 1).expand(grid_t, -1, grid_w).flatten()
            w_idx = torch.arange(grid_w).view(1, 1, -1).expand(grid_t, grid_h, -1).flatten()
            pieces.append(torch.stack([t_idx, h_idx, w_idx]) + text_len + offset)
            offset = int(pieces[-1].max()) + 1
            cursor = image_at + grid_t * grid_h * grid_w
        if cursor < len(tokens):
            pieces.append(torch.arange(len(tokens) - cursor).view(1, -1).expand(3, -1) + offset)
        row_positions = torch.cat(pieces, dim=1)
        positions[:, row, valid[row]] = row_positions.to(device=device, dtype=positions.dtype)
        deltas.append(int(row_positions.max()) + 1 - length)
    return positions, torch.tensor(deltas, device=device).unsqueeze(1)


@dataclass
class PrefillResult:
    """KV cache after the prompt and how long the vision encoder took."""

    cache: Any
    vision_seconds: float


class BlockDiffusionBackbone:
    """The forward passes of block-diffusion decoding on a transformers Qwen3-VL model."""

    def __init__(self, model: Any, synchronize: Callable[[], None] | None = None) -> None:
        self.model = model
        self.config = model.config
        self._synchronize = synchronize or (lambda: None)
        params = inspect.signature(model.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._vision_started: float | None = None
        self._vision_seconds = 0.0
        visual = model.model.visual
        visual.register_forward_pre_hook(self._vision_pre_hook)
        visual.register_forward_hook(self._vision_post_hook)

    @property
    def device(self) -> torch.device:
        """Device holding the weights."""
        return self.model.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """Weight dtype (also the dtype of logits and confidences)."""
        return self.model.lm_head.weight.dtype

    def _vision_pre_hook(self, *_: Any) -> None:
        self._synchronize()
        self._vision_started = time.perf_counter()

    def _vision_post_hook(self, *_: Any) -> None:
        self._synchronize()
        if self._vision_started is not None:
            self._vision_seconds += time.perf_counter() - self._vision_started
            self._vision_started = None

    def rope_index(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, image_grid_thw: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt rope positions [3, B, P] and per-sample deltas [B, 1] (see `multimodal_rope_index`)."""
        return multimodal_rope_index(
            input_ids,
            attention_mask,
            image_grid_thw,
            image_token_id=self.config.image_token_id,
            vision_start_token_id=self.config.vision_start_token_id,
            spatial_merge_size=self.config.vision_config.spatial_merge_size,
        )

    def _run(self, **kwargs: Any) -> Any:
        cache = kwargs.pop("cache", None)
        if cache is not None:
            kwargs[self._cache_kw] = cache
        return self.model.model(use_cache=True, **kwargs)

    def _cache_of(self, output: Any) -> Any:
        return getattr(output, self._cache_kw)

    def prefill(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        pixel_values: torch.Tensor | None,
        image_grid_thw: torch.Tensor | None,
        cache: Any = None,
    ) -> PrefillResult:
        """Run the prompt (with images) under a 4-D mask and return the filled KV cache (`cache` or a new one)."""
        self._vision_seconds = 0.0
        output = self._run(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
            cache=cache,
        )
        return PrefillResult(cache=self._cache_of(output), vision_seconds=self._vision_seconds)

    def step_logits(
        self, block_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """Logits of a block attending to the cache and itself; the cache is left as it was."""
        output = self._run(input_ids=block_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache)
        cache.crop(-block_ids.shape[1])
        return self.model.lm_head(output.last_hidden_state)

    def commit(
        self, block_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any
    ) -> None:
        """Append a finished block's keys and values to the cache."""
        self._run(input_ids=block_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache)

    def step_hidden(
        self, block_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """Last hidden states [B, L, D] of a block on a cache that writes where it is told (no output layer)."""
        output = self._run(input_ids=block_ids, position_ids=position_ids, attention_mask=attention_mask, cache=cache)
        return output.last_hidden_state

    def output_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output layer (vocabulary logits) for hidden states [..., D]."""
        return self.model.lm_head(hidden)
