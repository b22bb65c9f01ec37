"""One bag's result folder under ``OUT/bags/<name>``, written atomically (:func:`commit`), and what a rerun may
reuse (:func:`reusable`).

A bag is replayed into ``OUT/bags/.tmp-<name>-<random>``; ``fleet.json`` (:class:`BagRecord`) is written last and
the folder is renamed into place, so ``OUT/bags/<name>`` is always a whole result or absent. A folder left over
from an earlier result is moved aside first and removed after.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BAGS_DIR = "bags"
RECORD_NAME = "fleet.json"
ODOMETRY_NAME = "odometry.json"
TMP_PREFIX = ".tmp-"
OLD_PREFIX = ".old-"

DONE = "done"  # replayed to the end of the bag (a damaged bag: to the damage; or nothing could be planned)
FAILED = "failed"  # not replayed: unreadable bag, missing topics, model failure, the worker died twice, …
SKIPPED = "skipped"  # a rerun found a complete result for the same bag content, settings and model


@dataclass
class BagRecord:
    """What the fleet knows of one bag (``fleet.json`` in its result folder)."""

    name: str
    bag: str
    status: str
    key: str | None = None
    bag_sha256: str | None = None
    size_bytes: int = 0
    exit_code: int | None = None
    reason: str | None = None
    attempts: int = 1
    worker: str | None = None
    plans: int = 0
    planning_instants: int = 0
    wall_s: float = 0.0
    model_load_s: float = 0.0
    log: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BagRecord:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def bags_root(out: Path) -> Path:
    return out / BAGS_DIR


def tmp_dir_name(name: str) -> str:
    """A fresh name for one bag's temporary result folder."""
    return f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"


def new_tmp_dir(out: Path, name: str, tmp_name: str | None = None) -> Path:
    """A fresh temporary folder for one bag's result (beside its final place)."""
    path = bags_root(out) / (tmp_name or tmp_dir_name(name))
    path.mkdir(parents=True)
    return path


def write_json(path: Path, data: Any) -> None:
    """Strict JSON (no NaN), written atomically."""
    from wam_diff2_ros.replay.evaluation import to_jsonable

    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(to_jsonable(data), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def commit(tmp: Path, out: Path, record: BagRecord) -> Path:
    """Write ``record`` into ``tmp`` and move ``tmp`` to ``OUT/bags/<name>`` (replacing an earlier result)."""
    write_json(tmp / RECORD_NAME, record.to_json())
    final = bags_root(out) / record.name
    old = None
    if final.exists():
        old = final.with_name(f"{OLD_PREFIX}{record.name}-{uuid.uuid4().hex[:8]}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def record_failure(out: Path, record: BagRecord) -> Path:
    """Commit a failed bag's record alone (the worker died; nothing of its outputs is kept)."""
    return commit(new_tmp_dir(out, record.name), out, record)


def read_record(out: Path, name: str) -> BagRecord | None:
    """The committed record of bag ``name``, or None."""
    path = bags_root(out) / name / RECORD_NAME
    try:
        return BagRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def foreign_folders(out: Path, names: list[str]) -> list[Path]:
    """The bags' result folders that exist but hold no fleet result (no readable ``fleet.json``): the fleet never
    replaces those."""
    folders = [bags_root(out) / name for name in names]
    return [f for f in folders if (f.exists() or f.is_symlink()) and read_record(out, f.name) is None]


def reusable(out: Path, name: str, key: str) -> BagRecord | None:
    """The committed record of ``name`` if it is complete for exactly this bag content and settings."""
    record = read_record(out, name)
    return record if record is not None and record.status == DONE and record.key == key else None


def remove_leftovers(out: Path) -> list[Path]:
    """Remove temporary folders an interrupted run left behind; returns them."""
    root = bags_root(out)
    if not root.is_dir():
        return []
    leftovers = [p for p in root.iterdir() if p.name.startswith((TMP_PREFIX, OLD_PREFIX))]
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return leftovers
