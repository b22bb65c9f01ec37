"""The demo model's size, special token ids and the training data's constants."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from wam_diff2_ros.core.tokens import ALL_SPECIAL_TOKEN_IDS, EOS_TOKEN_ID, MASK_TOKEN_ID
from wam_diff2_ros.demo.tiny import (
    tiny_config,
)

BLOCK_SIZE = 32
MASK_ID = MASK_TOKEN_ID
EOS_ID = EOS_TOKEN_ID
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
SPECIAL_IDS = ALL_SPECIAL_TOKEN_IDS
TRAIN_SEED, HELD_OUT_SEED = 1, 2
TRAIN_DRIVE_SEEDS = tuple(range(10))  # seed 0 is the default sample bag's drive
# Drives no stage trains on: validation (the runs' checkpoints are chosen on them) and test (reported only, never
# used to choose). Seeds 5000 and above are left to the closed-loop scenarios.
VALIDATION_DRIVE_SEEDS = tuple(range(3000, 3006))
TEST_DRIVE_SEEDS = tuple(range(4000, 4010))
HELD_OUT_DRIVE_SEEDS = TEST_DRIVE_SEEDS
# Drives whose instants become samples (``demo/train/drives.py``); seed 0, the sample bag's drive, is not one of
# them, so the demo replay measures the model on a drive it never saw as a sample.
DRIVE_SAMPLE_SEEDS = tuple(range(1, 61))
# Frame sizes of the drive instants when they are asked at the replay camera's grid (``--drive-sizes camera``):
# six of eight are 16:9 frames of 640x360 or more (the sample bag's 15x8 grid of 120 tokens), two are others.
CAMERA_IMAGE_SIZES = ((960, 540), (640, 360), (1280, 720), (960, 540), (640, 360), (1280, 720), (320, 180), (800, 600))
# ``--drive-sizes``: the frame sizes each choice renders the drive instants at.
DRIVE_IMAGE_SIZES = {"mixed": IMAGE_SIZES, "camera": CAMERA_IMAGE_SIZES}
HELD_OUT_DRIVE_FRAMES = 4  # instants per test drive in the drive evaluation (each also mirrored)
VALIDATION_SPEED_FRAMES = 4  # instants at any speed and pose per validation drive (each also mirrored)
TEST_SPEED_FRAMES = 8  # ... per test drive
# Speed bands the evaluation reports the gate's pass rate and ADE in (m/s; the last is open).
SPEED_BANDS = ((0.0, 2.0), (2.0, 5.0), (5.0, 10.0), (10.0, 15.0), (15.0, math.inf))


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
