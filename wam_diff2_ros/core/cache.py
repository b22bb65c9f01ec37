"""Where the package keeps what it writes for this user (the demo model's expansion, the engine admission
verdicts): ``$WAM_DIFF2_CACHE``, else ``~/.cache/wam_diff2_ros``. Never the package's own folder, which an
install may not let it write."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "WAM_DIFF2_CACHE"


def user_cache_root() -> Path:
    """``$WAM_DIFF2_CACHE``, else ``~/.cache/wam_diff2_ros``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "wam_diff2_ros"
