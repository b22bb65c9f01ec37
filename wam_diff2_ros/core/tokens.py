"""The Qwen3-VL special token ids WAM-Diff2 uses: the one home of these numbers (tokenizer of Qwen3-VL-2B)."""

from __future__ import annotations

ENDOFTEXT_TOKEN_ID = 151643  # <|endoftext|>: bos and padding
IM_START_TOKEN_ID = 151644  # <|im_start|>
EOS_TOKEN_ID = 151645  # <|im_end|>: the end of an answer
VISION_START_TOKEN_ID = 151652  # <|vision_start|>
VISION_END_TOKEN_ID = 151653  # <|vision_end|>
IMAGE_TOKEN_ID = 151655  # <|image_pad|>
VIDEO_TOKEN_ID = 151656  # <|video_pad|>
MASK_TOKEN_ID = 151671  # the block-diffusion mask token
BOS_TOKEN_ID = PAD_TOKEN_ID = ENDOFTEXT_TOKEN_ID

#: The vision ids as the checkpoint's config.json names them.
SPECIAL_TOKEN_IDS: dict[str, int] = {
    "image_token_id": IMAGE_TOKEN_ID,
    "video_token_id": VIDEO_TOKEN_ID,
    "vision_start_token_id": VISION_START_TOKEN_ID,
    "vision_end_token_id": VISION_END_TOKEN_ID,
}

#: Every special id a prompt or answer uses (ChatML, vision, padding, mask, EOS).
ALL_SPECIAL_TOKEN_IDS: tuple[int, ...] = (
    ENDOFTEXT_TOKEN_ID,
    IM_START_TOKEN_ID,
    EOS_TOKEN_ID,
    VISION_START_TOKEN_ID,
    VISION_END_TOKEN_ID,
    IMAGE_TOKEN_ID,
    VIDEO_TOKEN_ID,
    MASK_TOKEN_ID,
)

#: generation_config.json of a checkpoint.
GENERATION_CONFIG: dict[str, int] = {"eos_token_id": EOS_TOKEN_ID, "pad_token_id": PAD_TOKEN_ID}
