"""Which bags a fleet run replays (:func:`find_bags`) and what makes a result reusable (:class:`Fingerprints`).

Inputs are bag folders (with ``metadata.yaml``), ``.mcap`` / ``.db3`` files, directories searched for bags, and
manifests: text files listing one such path a line (relative to the manifest; ``#`` comments). A bag's content
hash is the sha256 of its files; a result is reused only when the bag's hash, the settings and the model's hash
are all unchanged (:func:`result_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wam_diff2_ros.core.safe_names import safe_name

STORAGE_SUFFIXES = (".mcap", ".db3")
HASH_CACHE_NAME = "hashes.json"


class FleetUsageError(Exception):
    """A bad input path or manifest on the command line (exit code 2)."""


@dataclass(frozen=True)
class BagEntry:
    """One bag of the run: its path, its result folder's name, its size; ``missing`` when a manifest names a path
    that does not exist (recorded as a failed bag)."""

    path: Path
    name: str
    size_bytes: int
    missing: str | None = None

    def files(self) -> list[Path]:
        """The files that make up the bag (a folder's regular files, or the one storage file)."""
        if self.path.is_dir():
            return sorted(p for p in self.path.rglob("*") if p.is_file())
        return [self.path] if self.path.is_file() else []


def _is_bag_folder(path: Path) -> bool:
    return path.is_dir() and (path / "metadata.yaml").is_file()


def _expand(
    path: Path, origin: str, seen_manifests: set[Path], exclude: Path | None = None
) -> Iterable[tuple[Path, str | None]]:
    """(bag path, why it is missing) for one input; folders at or below ``exclude`` are not searched."""
    if not path.exists():
        yield path, f"{origin}: no such file or folder"
        return
    if path.is_dir():
        bags = list(_scan(path, exclude))
        if not bags:
            if origin == "argument":
                raise FleetUsageError(f"{path}: no bag inside (looked for metadata.yaml, *.mcap, *.db3)")
            yield path, f"{origin}: no bag inside {path}"
        for bag in bags:
            yield bag, None
        return
    if path.name == "metadata.yaml":
        yield path.parent, None
    elif path.suffix in STORAGE_SUFFIXES:
        yield path, None
    else:
        yield from _manifest(path, seen_manifests, exclude)


def _scan(folder: Path, exclude: Path | None = None) -> Iterable[Path]:
    """Bag folders and storage files at or below ``folder`` (not inside a bag folder, nor at or below
    ``exclude``), in name order."""
    if exclude is not None and folder.resolve().is_relative_to(exclude):
        return
    if _is_bag_folder(folder):
        yield folder
        return
    for child in sorted(folder.iterdir()):
        if child.is_dir():
            yield from _scan(child, exclude)
        elif child.suffix in STORAGE_SUFFIXES:
            yield child


def _manifest(path: Path, seen_manifests: set[Path], exclude: Path | None) -> Iterable[tuple[Path, str | None]]:
    resolved = path.resolve()
    if resolved in seen_manifests:
        raise FleetUsageError(f"manifest {path} includes itself")
    seen_manifests.add(resolved)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetUsageError(f"{path}: neither a bag nor a readable manifest ({exc})") from None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line:
            entry = Path(line).expanduser()
            entry = entry if entry.is_absolute() else path.parent / entry
            yield from _expand(entry, f"manifest {path} line {number}", seen_manifests, exclude)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.is_file() else 0


def find_bags(inputs: Sequence[str | Path], out: Path | None = None) -> list[BagEntry]:
    """The bags named by ``inputs`` (see the module docstring), each once, with unique result folder names (the
    bag's name as a slug, :func:`~wam_diff2_ros.core.safe_names.safe_name`; ``-<8 hex of its path>`` appended where
    two bags share a name). Folders searched skip the output folder ``out``; a bag named inside it, or an ``out``
    inside a bag, is refused (the results would replace or be read as bags)."""
    exclude = None if out is None else Path(out).expanduser().resolve()
    if not inputs:
        raise FleetUsageError("no bags: pass bag folders, directories of bags or a manifest")
    found: dict[Path, str | None] = {}
    seen_manifests: set[Path] = set()
    for item in inputs:
        path = Path(item).expanduser()
        if not path.exists():
            raise FleetUsageError(f"{item}: no such file or folder")
        if exclude is not None and path.resolve().is_relative_to(exclude):
            raise FleetUsageError(f"{item}: inside --out {out}; choose an --out outside the bags")
        for bag, missing in _expand(path, "argument", seen_manifests, exclude):
            bag = bag.resolve()
            if exclude is not None and (bag.is_relative_to(exclude) or exclude.is_relative_to(bag)):
                raise FleetUsageError(f"{bag}: the bag and --out {out} overlap; choose an --out outside the bags")
            found.setdefault(bag, missing)
    names = {path: safe_name((path.stem if path.is_file() else path.name) or "bag") for path in found}
    clashes = Counter(name.casefold() for name in names.values())
    entries = []
    for path, missing in found.items():
        name = names[path]
        if clashes[name.casefold()] > 1:
            name = f"{name}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        entries.append(BagEntry(path, name, _size(path), missing))
    return entries


@dataclass
class Fingerprints:
    """sha256 of files, remembered in ``cache_path`` by path, size and modification time (a file rewritten in
    place gets a new modification time and is hashed again)."""

    cache_path: Path | None = None
    cache: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cache_path is not None and self.cache_path.is_file():
            try:
                self.cache = json.loads(self.cache_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self.cache = {}

    def file(self, path: Path) -> str:
        """The sha256 (hex) of one file."""
        stat = path.stat()
        key = str(path.resolve())
        cached = self.cache.get(key)
        if cached and cached[0] == stat.st_size and cached[1] == stat.st_mtime_ns:
            return str(cached[2])
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        self.cache[key] = [stat.st_size, stat.st_mtime_ns, digest.hexdigest()]
        return digest.hexdigest()

    def tree(self, root: Path, files: Sequence[Path]) -> str:
        """One sha256 over the files' relative names and contents."""
        digest = hashlib.sha256()
        for path in files:
            relative = path.relative_to(root) if root.is_dir() else Path(path.name)
            digest.update(f"{relative.as_posix()}\0{self.file(path)}\n".encode())
        return digest.hexdigest()

    def bag(self, entry: BagEntry) -> str:
        """The content hash of a bag."""
        return self.tree(entry.path, entry.files())

    def model(self, checkpoint: Path) -> str:
        """The content hash of a checkpoint directory."""
        return self.tree(checkpoint, sorted(p for p in checkpoint.rglob("*") if p.is_file()))

    def save(self) -> None:
        """Write the cache (atomically) when it has a path."""
        if self.cache_path is None:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_path.with_name(f".{self.cache_path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(self.cache, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.cache_path)


def result_key(bag_hash: str, settings: Mapping[str, Any]) -> str:
    """The identity of one bag's result: the bag's content hash and the run's settings (model hash included)."""
    text = json.dumps({"bag": bag_hash, "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
