"""Where several episodes write (:func:`episode_folders`): one folder per scenario inside ``--out``, named by the
slug rule (:func:`wam_diff2_ros.core.safe_names.safe_name`), all checked before anything runs.

Refused before anything runs: two scenarios whose names give the same folder, a name that gives the pooled table's
file names (or ``references``), a folder that is a file or a link leading outside ``--out``, and, without
``--overwrite``, a folder that holds anything but episode outputs, or a finished episode that is not this one
(another scenario, or other settings: model, size, latency, overrides, duration ...). A folder with a finished run
of the same episode is kept (resume); one with an unfinished run of it (interrupted, or no ``score.json``) is run
again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.safe_names import UnsafeNameError, child_folders
from wam_diff2_ros.drive.run import OUTPUT_NAMES, DriveUsageError
from wam_diff2_ros.drive.world import ScenarioSpec

#: What a run of several episodes writes into ``--out`` beside the scenarios' folders: the pooled table's files and
#: the reference planners' folder (no scenario folder may take these names).
TABLE_NAMES = ("scores.json", "scores.md", "references")


def episode_folders(
    out: Path,
    specs: Sequence[ScenarioSpec],
    overwrite: bool,
    finished: Callable[[ScenarioSpec, Path], dict[str, Any] | None],
) -> dict[str, Path]:
    """Each scenario's folder inside ``out`` by name (see the module docstring); ``finished(spec, folder)`` is the
    resume rule (the folder's ``score.json`` when it is a finished run of this episode, else None). Raises
    :class:`DriveUsageError` on anything refused."""
    if out.exists() and not out.is_dir():
        raise DriveUsageError(f"--out {out}: exists and is not a directory")
    try:
        folders = child_folders(out, [spec.name for spec in specs], reserved=TABLE_NAMES)
    except UnsafeNameError as exc:
        raise DriveUsageError(f"--out {out}: {exc}") from None
    for spec in specs:
        folder = folders[spec.name]
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise DriveUsageError(f"{folder} (scenario {spec.name!r}): exists and is not a folder")
        if overwrite or not folder.exists() or finished(spec, folder) is not None:
            continue
        problem = _not_rerunnable(folder, spec)
        if problem:
            raise DriveUsageError(
                f"{folder} (scenario {spec.name!r}) {problem}; pass --overwrite to replace it or choose another --out"
            )
    return folders


def _not_rerunnable(folder: Path, spec: ScenarioSpec) -> str | None:
    """Why an existing folder may not be replaced without ``--overwrite`` (None: an unfinished run of ``spec``)."""
    others = sorted(p.name for p in folder.iterdir() if p.name not in OUTPUT_NAMES)
    if others:
        return f"holds files that are not episode outputs ({', '.join(others[:5])})"
    score = folder / "score.json"
    if not score.exists():
        return None  # an episode that ended before writing its score
    try:
        document = json.loads(score.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "holds a score.json that cannot be read"
    scenario = document.get("scenario") if isinstance(document, dict) else None
    if not isinstance(scenario, dict) or scenario.get("name") != spec.name:
        return "holds another scenario's episode"
    if document.get("interrupted"):
        return None
    return "holds a finished episode with other settings (model, size, latency, overrides, duration or seed)"
