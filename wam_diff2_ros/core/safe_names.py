"""Names taken from inputs (scenario names, bag folder names, ids) as file and folder names that stay inside the
output folder they are put in: :func:`safe_name` (the one slug rule), :func:`child_path` and :func:`child_folders`
(one folder per name, never two names in one folder).

The slug rule: a name of ASCII letters, digits, ``.``, ``_`` and ``-`` that starts with a letter, digit or ``_``
and has at most :data:`MAX_NAME_CHARS` characters is used as it is. Any other name (``..``, ``a/b``, an absolute
path, spaces, unicode, a very long name) has each run of other characters replaced by ``_``, leading and trailing
``.``, ``_``, ``-`` removed, is cut to fit, and gets ``-`` and 8 hex digits of the name's sha256 appended: the same
name always gives the same slug, and two names that differ give different slugs. An empty name is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

#: The longest slug (well below the 255 bytes a file name may have, leaving room for prefixes and suffixes).
MAX_NAME_CHARS = 80
_KEPT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_OTHER = re.compile(r"[^A-Za-z0-9._-]+")
_DIGEST_CHARS = 8


class UnsafeNameError(ValueError):
    """A name that cannot become a file or folder name inside the output folder (empty, or clashing)."""


def safe_name(name: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """``name`` as a single, safe path component (see the module docstring for the rule)."""
    if not isinstance(name, str) or not name:
        raise UnsafeNameError(f"an empty name ({name!r}) cannot name a file or folder")
    if len(name) <= max_chars and _KEPT.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    stem = _OTHER.sub("_", name).strip("._-")[: max_chars - _DIGEST_CHARS - 1].rstrip("._-")
    return f"{stem or 'name'}-{digest}"


def child_path(out: Path, name: str) -> Path:
    """``out / safe_name(name)``, checked to resolve inside ``out`` (a symbolic link there that leads elsewhere is
    refused)."""
    path = Path(out) / safe_name(name)
    root = Path(out).resolve()
    if not path.resolve().is_relative_to(root):
        raise UnsafeNameError(f"{path} leads outside {out} (a symbolic link); remove it or choose another folder")
    return path


def child_folders(out: Path, names: Iterable[str], reserved: Iterable[str] = ()) -> dict[str, Path]:
    """One path inside ``out`` per name (:func:`child_path`). Refused before anything is written: two names whose
    slugs are the same (case ignored, as on case-insensitive file systems), or a slug that is one of ``reserved``
    (the files the command itself writes into ``out``)."""
    taken = {r.casefold(): f"the output {r}" for r in reserved}
    folders: dict[str, Path] = {}
    for name in names:
        if name in folders:
            continue
        path = child_path(out, name)
        key = path.name.casefold()
        if key in taken:
            raise UnsafeNameError(f"name {name!r} gives the folder {path.name!r}, as {taken[key]} does; rename one")
        taken[key] = f"name {name!r}"
        folders[name] = path
    return folders
