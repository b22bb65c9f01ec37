"""Prompt tokenisation exactly as the reference pipeline does it: a checkpoint's chat template and tokenizer, the
images of a chat preprocessed (core/image_preprocess.py on the host, core/device_preprocess.py on a device) and
their placeholders expanded to one token per visual token, the batch padded.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .device_preprocess import preprocess_image_on_device
from .image_preprocess import (
    DEFAULT_MAX_PIXELS,
    DEFAULT_MIN_PIXELS,
    ImageProcessorConfig,
    ProcessedImage,
    pixel_values,
    preprocess_image,
)

IMAGE_PAD_TOKEN = "<|image_pad|>"


@dataclass
class ModelInputs:
    """Tokenised batch ready for the decoder (CPU tensors; move with `.to(device)`)."""

    input_ids: torch.Tensor  # [B, P] int64
    attention_mask: torch.Tensor  # [B, P] int64, 0 on padding
    image_patches: torch.Tensor | None  # [sum patches, C, patch**2] uint8 (`pixel_values` are built from them)
    image_grid_thw: torch.Tensor | None  # [num_images, 3] int64
    prompt_texts: list[str]
    num_image_tokens: list[int]
    image_config: ImageProcessorConfig  # normalisation of the patches into pixel values

    @functools.cached_property
    def pixel_values(self) -> torch.Tensor | None:
        """The vision encoder's input [sum patches, D] float32, built on the patches' device (`pixel_values`)."""
        return None if self.image_patches is None else pixel_values(self.image_patches, self.image_config)

    def to(self, device: torch.device | str) -> ModelInputs:
        """A copy with every tensor on `device` (the images as uint8 patches: an eighth of the pixel values' bytes)."""
        return ModelInputs(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            image_patches=None if self.image_patches is None else self.image_patches.to(device),
            image_grid_thw=None if self.image_grid_thw is None else self.image_grid_thw.to(device),
            prompt_texts=self.prompt_texts,
            num_image_tokens=self.num_image_tokens,
            image_config=self.image_config,
        )


def _concatenated(patches: list[torch.Tensor]) -> torch.Tensor | None:
    """All images' patches in one tensor (no copy for a single image)."""
    if not patches:
        return None
    return patches[0] if len(patches) == 1 else torch.cat(patches, dim=0)


class WamDiff2Processor:
    """Chat template + tokenizer + image preprocessing of a WAM-Diff2 checkpoint (image-only)."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str,
        image_config: ImageProcessorConfig,
        min_pixels: int = DEFAULT_MIN_PIXELS,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.image_config = image_config
        self.min_pixels = int(min_pixels)
        self.max_pixels = int(max_pixels)
        # None: images are resized and cut on the host (PIL); a device: there (`device_preprocess`, same bits)
        self.images_on: torch.device | None = None
        if self.min_pixels <= 0 or self.max_pixels < self.min_pixels:
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels}, {self.max_pixels}")

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The prompt text of a chat, with the assistant generation prompt appended."""
        placeholder_messages = [
            {
                "role": message["role"],
                "content": [
                    {"type": "image"} if item.get("type") == "image" else dict(item) for item in message["content"]
                ]
                if isinstance(message["content"], list)
                else message["content"],
            }
            for message in messages
        ]
        return self.tokenizer.apply_chat_template(
            placeholder_messages, chat_template=self.chat_template, tokenize=False, add_generation_prompt=True
        )

    def __call__(self, conversations: Sequence[list[dict[str, Any]]], padding_side: str = "left") -> ModelInputs:
        """Tokenise chats (images inside the message content) into one padded batch."""
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        texts: list[str] = []
        all_patches: list[torch.Tensor] = []
        grids: list[tuple[int, int, int]] = []
        token_counts: list[int] = []
        for messages in conversations:
            images = [
                item["image"]
                for message in messages
                if isinstance(message["content"], list)
                for item in message["content"]
                if item.get("type") == "image"
            ]
            text = self.render(messages)
            if text.count(IMAGE_PAD_TOKEN) != len(images):
                raise ValueError(
                    f"chat template produced {text.count(IMAGE_PAD_TOKEN)} image placeholders for {len(images)} images"
                )
            processed = [self._preprocess(img) for img in images]
            pieces = text.split(IMAGE_PAD_TOKEN)
            expanded = pieces[0]
            for item, piece in zip(processed, pieces[1:], strict=True):
                expanded += IMAGE_PAD_TOKEN * item.num_tokens + piece
            texts.append(expanded)
            all_patches.extend(item.patches for item in processed)
            grids.extend(item.grid_thw for item in processed)
            token_counts.append(sum(item.num_tokens for item in processed))
        encoded = self._tokenize(texts, padding_side)
        return ModelInputs(
            input_ids=encoded[0],
            attention_mask=encoded[1],
            image_patches=_concatenated(all_patches),
            image_grid_thw=torch.tensor(grids, dtype=torch.long) if grids else None,
            prompt_texts=texts,
            num_image_tokens=token_counts,
            image_config=self.image_config,
        )

    def _preprocess(self, image: Any) -> ProcessedImage:
        """One image on the host path, or on `images_on` (`device_preprocess.preprocess_image_on_device`)."""
        if self.images_on is None:
            return preprocess_image(image, self.image_config, self.min_pixels, self.max_pixels)
        return preprocess_image_on_device(image, self.image_config, self.min_pixels, self.max_pixels, self.images_on)

    def _tokenize(self, texts: list[str], padding_side: str) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self.tokenizer(text)["input_ids"] for text in texts]
        longest = max(len(row) for row in rows)
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.convert_tokens_to_ids("<|endoftext|>")
        ids = torch.full((len(rows), longest), int(pad_id), dtype=torch.long)
        mask = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, row in enumerate(rows):
            if padding_side == "left":
                ids[i, longest - len(row) :] = torch.tensor(row, dtype=torch.long)
                mask[i, longest - len(row) :] = 1
            else:
                ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
                mask[i, : len(row)] = 1
        return ids, mask

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of response tokens, special tokens removed, surrounding whitespace stripped."""
        return self.decode_raw(token_ids).strip()

    def decode_raw(self, token_ids: Sequence[int]) -> str:
        """Response tokens → text without special tokens, surrounding whitespace kept (`decode` strips it)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=True)
