"""The drives demo weights are judged on, none of them trained on: instants at any speed and pose on the roads
of the validation drives (the weights a run exports are chosen on them) and of the test drives (reported, never
used to choose), and instants of the test drives as driven (what a replay of their bags asks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wam_diff2_ros.demo.train.config import (
    HELD_OUT_DRIVE_FRAMES,
    HELD_OUT_DRIVE_SEEDS,
    HELD_OUT_SEED,
    IMAGE_SIZES,
    TEST_DRIVE_SEEDS,
    TEST_SPEED_FRAMES,
    VALIDATION_DRIVE_SEEDS,
    VALIDATION_SPEED_FRAMES,
)
from wam_diff2_ros.demo.train.data import DrivingSample, ImagePool
from wam_diff2_ros.demo.train.drives import drive_samples
from wam_diff2_ros.demo.train.evaluate import evaluate

HeldOut = tuple[ImagePool, list[DrivingSample]]


def validation_set() -> HeldOut:
    """Instants at any speed on the validation drives' roads (each also mirrored)."""
    from wam_diff2_ros.demo.train.speeds import speed_samples

    return speed_samples(VALIDATION_DRIVE_SEEDS, VALIDATION_SPEED_FRAMES, seed=HELD_OUT_SEED + 10, sizes=IMAGE_SIZES)


def test_sets() -> dict[str, HeldOut]:
    """``test_speeds``: instants at any speed on the test drives' roads; ``held_out_drives``: instants of the
    test drives as driven (each also mirrored)."""
    from wam_diff2_ros.demo.train.speeds import speed_samples

    return {
        "test_speeds": speed_samples(TEST_DRIVE_SEEDS, TEST_SPEED_FRAMES, seed=HELD_OUT_SEED + 20, sizes=IMAGE_SIZES),
        "held_out_drives": drive_samples(HELD_OUT_DRIVE_SEEDS, HELD_OUT_DRIVE_FRAMES, seed=HELD_OUT_SEED),
    }


def judge(engine: Any, validation: HeldOut, tests: dict[str, HeldOut]) -> dict[str, Any]:
    """The held-out metrics of `engine`'s weights: ``validation_speeds``, ``test_speeds``, ``held_out_drives``."""
    drives = {
        "validation_speeds": VALIDATION_DRIVE_SEEDS,
        "test_speeds": TEST_DRIVE_SEEDS,
        "held_out_drives": HELD_OUT_DRIVE_SEEDS,
    }
    result = {
        "validation_speeds": {
            "drives": list(drives["validation_speeds"]),
            **evaluate(engine, validation[1], validation[0].images),
        }
    }
    for name, (pool, samples) in tests.items():
        result[name] = {"drives": list(drives[name]), **evaluate(engine, samples, pool.images)}
    if "held_out_drives" in result:
        result["held_out_drives"].update(instants_per_drive=HELD_OUT_DRIVE_FRAMES, mirrored=True)
    return result


def load_engine(demo_dir: Path, cache_dir: Path) -> Any:
    """The demo files in `demo_dir` expanded into `cache_dir` and loaded as an engine (CPU, float32)."""
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.demo import expand as demo_files

    return Engine.load(demo_files.demo_checkpoint(cache_dir=cache_dir, demo_dir=demo_dir), "cpu", "float32")


def judge_folder(demo_dir: Path, cache_dir: Path) -> dict[str, Any]:
    """:func:`judge` for the demo files in `demo_dir` (e.g. the shipped ones), through the real engine."""
    engine = load_engine(demo_dir, cache_dir)
    try:
        return judge(engine, validation_set(), test_sets())
    finally:
        engine.close()
