"""Tokenisation for training: the demo processor, prompt and response token ids, the vocabulary in use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wam_diff2_ros.core.image_preprocess import ImageProcessorConfig
from wam_diff2_ros.core.processor import IMAGE_PAD_TOKEN, WamDiff2Processor
from wam_diff2_ros.core.prompts import build_messages, build_planning_prompt
from wam_diff2_ros.demo.tiny import (
    PREPROCESSOR_CONFIG,
    VL_CHAT_TEMPLATE,
    write_processor_files,
    write_tokenizer_files,
)
from wam_diff2_ros.demo.train.config import BLOCK_SIZE, COMMANDS, DEMO_PREPROCESSOR_OVERRIDES, EOS_ID, SPECIAL_IDS


def demo_processor(work_dir: Path) -> WamDiff2Processor:
    """The demo checkpoint's processor (real Qwen3 tokenizer, VL chat template, capped pixels)."""
    from transformers import AutoTokenizer

    work_dir.mkdir(parents=True, exist_ok=True)
    write_tokenizer_files(work_dir)
    write_processor_files(work_dir, DEMO_PREPROCESSOR_OVERRIDES)
    tokenizer = AutoTokenizer.from_pretrained(str(work_dir), local_files_only=True)
    return WamDiff2Processor(tokenizer, VL_CHAT_TEMPLATE, demo_image_config())


def demo_image_config() -> ImageProcessorConfig:
    """The demo checkpoint's image preprocessing (the tiny checkpoint's, pixels capped)."""
    return ImageProcessorConfig.from_dict({**PREPROCESSOR_CONFIG, **DEMO_PREPROCESSOR_OVERRIDES})


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
