"""What a decoding engine must do to execute block-diffusion steps (`Runner`), and the exact engine's runner.

The rules (which proposals are taken, when a block or the decode stops) live in decoding.py and are the same
for every engine; a runner only executes: fill a cache with the prompt, say which rows of a block still need a
proposal, propose tokens for them, write a finished block into the cache. `ExactRunner` does it as the
reference does; `fast.FastRunner` on a static cache. Which one runs is chosen in one place:
`selection.Runners.select`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..model import BlockDiffusionBackbone
from .sampling import SamplingParams, sample_batch


@dataclass(frozen=True)
class AllRows:
    """`Runner.open_rows`' answer when every row of the block is computed (not only the masked ones)."""


ALL_ROWS = AllRows()
OpenRows = AllRows | torch.Tensor  # every row, or the flat indices ([N], int64) of the still-masked rows


class Runner(Protocol):
    """Executes the decoder's steps for one decode (a runner may be reused by later decodes)."""

    def prefill(
        self,
        input_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        positions: torch.Tensor,
        pixel_values: torch.Tensor | None,
        image_grid_thw: torch.Tensor | None,
        capacity: int,
    ) -> float:
        """Fill the cache with the prompt (`capacity`: prompt + every response block); returns vision seconds."""
        ...

    def open_rows(self, masked: torch.Tensor) -> OpenRows | None:
        """None when nothing in `masked` [B, L] is masked (the step's one device->host read), else which rows
        the step computes."""
        ...

    def propose(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        block_start: int,
        rows: OpenRows,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position of the block `tokens` [B, L] a proposed token and its probability ([B, L] each)."""
        ...

    def commit(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, block_start: int) -> None:
        """Write a finished block into the cache."""
        ...

    def expand(self, rows: int, prompt_len: int) -> None:
        """Broadcast a one-row prefilled cache (its first `prompt_len` slots) to `rows` rows: candidate batches
        decode one prompt `rows` times after one prefill."""
        ...


class ExactRunner:
    """Executes denoising steps as the reference does: a `DynamicCache` grown and cropped, logits for every row."""

    def __init__(self, backbone: BlockDiffusionBackbone) -> None:
        self.backbone = backbone
        self.cache: Any = None

    def prefill(self, input_ids, prompt_mask, positions, pixel_values, image_grid_thw, capacity: int) -> float:
        """Fill the cache with the prompt; returns the vision encoder's seconds."""
        result = self.backbone.prefill(input_ids, prompt_mask, positions, pixel_values, image_grid_thw)
        self.cache = result.cache
        return result.vision_seconds

    def open_rows(self, masked: torch.Tensor) -> OpenRows | None:
        """None when nothing is masked (one device->host read), else `ALL_ROWS`."""
        return ALL_ROWS if masked.any() else None

    def propose(self, tokens, positions, mask, block_start: int, rows: OpenRows, sampling: SamplingParams, generator):
        """Per position a proposal and its probability for the block `tokens`."""
        logits = self.backbone.step_logits(tokens, positions, mask, self.cache)
        return sample_batch(logits, sampling, generator=generator)

    def commit(self, tokens, positions, mask, block_start: int) -> None:
        """Write a finished block into the cache."""
        self.backbone.commit(tokens, positions, mask, self.cache)

    def expand(self, rows: int, prompt_len: int) -> None:
        """Repeat the one-row prompt cache for `rows` rows (the `DynamicCache`'s own batch repeat)."""
        self.cache.batch_repeat_interleave(rows)
