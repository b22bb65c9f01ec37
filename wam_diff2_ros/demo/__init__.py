"""Model fixtures shipped with the package: the trained demo model, random tiny checkpoints, and
:func:`resolve_model`, the one place that maps ``"demo"`` | ``"tiny"`` | a path to a checkpoint directory.

Depends on :mod:`wam_diff2_ros.core` only (``demo.train`` is the exception: it renders the simulator's frames).
"""

from wam_diff2_ros.demo.resolve import MODEL_NAMES, ModelSpecError, resolve_model

__all__ = ["MODEL_NAMES", "ModelSpecError", "resolve_model"]
