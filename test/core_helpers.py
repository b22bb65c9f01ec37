"""Helpers shared by the core tests: cached tiny checkpoints and synthetic images."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

#: Every wait in the tests is for an event; its limit only guards against a hang, so a loaded machine must not trip
#: it: the wait helpers multiply each limit by this (WAM_DIFF2_TEST_WAIT_SCALE overrides). Waits that succeed return
#: as soon as the event happens, so a generous limit costs a passing test nothing.
WAIT_SCALE = float(os.environ.get("WAM_DIFF2_TEST_WAIT_SCALE", "6"))


def patient(seconds: float) -> float:
    """A wait limit, scaled for a busy machine (see ``WAIT_SCALE``)."""
    return seconds * WAIT_SCALE


_ROOT: Path | None = None
_CACHE: dict[tuple, Path] = {}


def _root() -> Path:
    global _ROOT
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="wam_diff2_tiny_"))
        atexit.register(shutil.rmtree, _ROOT, True)
    return _ROOT


def tiny_checkpoint(**kwargs: Any) -> Path:
    """A tiny checkpoint built once per test session for each distinct set of arguments (do not modify it)."""
    from wam_diff2_ros.demo.tiny import make_tiny_checkpoint

    key = tuple(sorted(kwargs.items()))
    if key not in _CACHE:
        _CACHE[key] = make_tiny_checkpoint(_root() / f"tiny{len(_CACHE)}", **kwargs)
    return _CACHE[key]


def copy_checkpoint(source: Path, target: Path) -> Path:
    """A writable copy of a checkpoint directory (for corruption tests)."""
    shutil.copytree(source, target)
    return target


def noise_image(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A deterministic RGB uint8 noise image."""
    return (np.random.RandomState(seed).rand(height, width, 3) * 255).astype(np.uint8)


def can_build_row_kernel(isa: str) -> bool:
    """Whether this machine has what core/engine/cpu_kernels.py's kernel needs for `isa` (g++, ninja, a variant)."""
    from wam_diff2_ros.core.engine.cpu_kernels import kernel_flags

    try:
        import ninja  # noqa: F401

        has_ninja = True
    except ImportError:
        has_ninja = shutil.which("ninja") is not None
    return has_ninja and shutil.which("g++") is not None and kernel_flags(isa) is not None
