"""``"demo"`` | ``"tiny"`` | a path → a checkpoint directory: the one home of the model names.

Every caller that takes a model from a user (the node's ``model.path``, ``wam-diff2-replay --model``,
``wam-diff2-infer --model_id``, ``wam-diff2-bench --model_id``) resolves it here first and then hands a
directory to :meth:`wam_diff2_ros.core.engine.Engine.load`, which knows no names.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from wam_diff2_ros.core.cache import user_cache_root
from wam_diff2_ros.demo import expand

DEMO = "demo"
TINY = "tiny"
MODEL_NAMES = (DEMO, TINY)
TINY_SEED = 0


class ModelSpecError(RuntimeError):
    """A model name whose files cannot be produced (e.g. the demo weights are missing or corrupt)."""


def is_model_name(spec: str | os.PathLike[str]) -> bool:
    """True for the names :func:`resolve_model` maps to a generated checkpoint (``demo``, ``tiny``)."""
    return str(spec).strip().lower() in MODEL_NAMES


def tiny_checkpoint(cache_dir: Path | None = None, seed: int = TINY_SEED) -> Path:
    """A random tiny checkpoint (same seed → same weights) under the cache root, built once (~2 s)."""
    from wam_diff2_ros.demo.tiny import make_tiny_checkpoint

    root = Path(cache_dir).expanduser() if cache_dir is not None else user_cache_root()
    final = root / f"tiny-seed{seed}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        make_tiny_checkpoint(staging, seed=seed)
        with contextlib.suppress(OSError):  # lost a race with another process: theirs is the same
            staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def resolve_model(spec: str | os.PathLike[str]) -> Path:
    """The checkpoint directory for ``spec``: ``"demo"`` (the trained demo model, expanded into the cache on
    first use), ``"tiny"`` (a random tiny model, built into the cache on first use), or a path (returned with
    ``~`` expanded; :meth:`Engine.load` validates it). A name wins over a same-named relative directory:
    write ``./demo`` for that. Raises :class:`ModelSpecError` when a name's files cannot be produced."""
    name = str(spec).strip().lower()
    try:
        if name == DEMO:
            return expand.demo_checkpoint()
        if name == TINY:
            return tiny_checkpoint()
    except Exception as exc:  # missing or corrupt demo files, no tokenizer package, disk full
        raise ModelSpecError(f"model {name!r} is not available: {exc}") from exc
    return Path(spec).expanduser()


def model_directory(spec: str) -> tuple[Path, str]:
    """A model a user gave (``demo``, ``tiny`` or a checkpoint directory) as (its checkpoint directory, how it was
    chosen). Raises :class:`ModelSpecError` when a name's files cannot be produced and ``NotADirectoryError``
    when a path is not a directory. The one rule of the replay, the closed loop and the egodriver policy."""
    text = str(spec).strip()
    if is_model_name(text):
        name = text.lower()
        return resolve_model(name), f"the package's {name} model"
    path = Path(text).expanduser()
    if not path.is_dir():
        raise NotADirectoryError(f"{spec}: not a directory (expected a checkpoint directory, demo or tiny)")
    return path.resolve(), "a checkpoint directory"
