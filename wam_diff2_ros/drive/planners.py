"""The one place that turns ``--model`` into what plans an episode: a reference planner's configuration and engine
(:mod:`wam_diff2_ros.drive.reference`) or the node's configuration and the model loaded as the node loads it
(``demo``, ``tiny``, a checkpoint: :func:`wam_diff2_ros.demo.resolve.resolve_model`), and what identifies it for a
resumed run (:func:`planner_identity`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wam_diff2_ros.drive.reference import is_reference, reference_config, reference_engine


class DriveUsageError(ValueError):
    """A bad command line or scenario (nothing ran)."""


def node_config(model: str, device: str | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """The node's configuration for an episode: the node's defaults, ``overrides``, the model, raw images."""
    from wam_diff2_ros.replay.errors import ReplayUsageError
    from wam_diff2_ros.replay.settings import ReplayOptions, build_config

    options = ReplayOptions(bag=Path("."), out=Path("."), model=model, device=device, overrides=dict(overrides or {}))
    try:
        return build_config(options, dict(overrides or {}), None)
    except ReplayUsageError as exc:
        raise DriveUsageError(str(exc)) from None


def planner_config(model: str, device: str | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """The node configuration for ``--model``: a reference planner's (:func:`reference_config`) or a model's
    (:func:`node_config`: ``demo``, ``tiny``, a checkpoint)."""
    if is_reference(model):
        return reference_config(model, overrides)
    return node_config(model, device, overrides)


def load_planner(config: Any) -> Any:
    """The engine that plans for ``config``: a reference planner, or the model loaded as the node loads it."""
    if is_reference(config.model_path):
        return reference_engine(config.model_path)
    from wam_diff2_ros.ros.node import load_engine

    return load_engine(config)


def planner_identity(config: Any) -> dict[str, Any]:
    """What identifies the planner of an episode: its name or checkpoint, the checkpoint's content hash, the dtype,
    the decoding engine asked for (a reference planner: its name and the package version)."""
    from wam_diff2_ros import __version__

    if is_reference(config.model_path):
        return {"planner": config.model_path, "model_sha256": None, "package_version": __version__}
    from wam_diff2_ros.core.cache import user_cache_root
    from wam_diff2_ros.demo.resolve import resolve_model
    from wam_diff2_ros.fleet.bags import Fingerprints

    checkpoint = Path(resolve_model(config.model_path))
    digest = None
    if checkpoint.is_dir():  # hashed once per file version (remembered by path, size and modification time)
        fingerprints = Fingerprints(user_cache_root() / "model_hashes.json")
        digest = fingerprints.model(checkpoint)
        fingerprints.save()
    return {
        "planner": "model",
        "model_sha256": digest,
        "dtype": str(config.dtype),
        "engine": str(config.decode.engine),
    }
