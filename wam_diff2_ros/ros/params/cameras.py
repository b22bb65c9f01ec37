"""The camera section of the parameters: ``cameras.*``, the planning prompt's cameras and template, and the camera
lists of detection and VQA, read through a :class:`~.reader.ValueReader` (every problem collected)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wam_diff2_ros.core.prompts import IMAGE_PLACEHOLDER, resolve_planning_template

from .reader import ValueReader
from .specs import TRANSPORTS


@dataclass(frozen=True)
class CameraConfig:
    """One camera: name, transport (raw|compressed), optical frame used when the header has none."""

    name: str
    transport: str
    frame_id: str


def read_cameras(reader: ValueReader) -> tuple[CameraConfig, ...]:
    """``cameras.names`` / ``transports`` / ``frame_ids`` → one :class:`CameraConfig` per camera."""
    names = [n.strip() for n in reader.strings("cameras.names")]
    if not names:
        reader.fail("cameras.names", "at least one camera is needed")
        return (CameraConfig("front", "raw", "front_optical"),)
    for name in names:
        if not name or not all(c.isalnum() or c == "_" for c in name):
            reader.fail("cameras.names", f"camera name {name!r} must be non-empty letters, digits or _")
    if len(set(names)) != len(names):
        reader.fail("cameras.names", f"camera names must be unique, got {names}")
    transports = reader.strings("cameras.transports") or ["raw"]
    if len(transports) == 1:
        transports = transports * len(names)
    if len(transports) != len(names):
        reader.fail("cameras.transports", f"needs 1 or {len(names)} entries, got {len(transports)}")
        transports = ["raw"] * len(names)
    for transport in transports:
        if transport not in TRANSPORTS:
            reader.fail("cameras.transports", f"entries must be raw or compressed, got {transport!r}")
    frame_ids = reader.strings("cameras.frame_ids") or [""]
    if len(frame_ids) == 1 and len(names) > 1 and frame_ids[0] == "":
        frame_ids = frame_ids * len(names)
    if len(frame_ids) != len(names):
        reader.fail("cameras.frame_ids", f"needs {len(names)} entries (or ['']), got {len(frame_ids)}")
        frame_ids = [""] * len(names)
    return tuple(
        CameraConfig(name, transport, frame_id or f"{name}_optical")
        for name, transport, frame_id in zip(names, transports, frame_ids, strict=True)
    )


def camera_index(reader: ValueReader, name: str, cameras: Sequence[CameraConfig], value: str) -> int:
    """The index of camera ``value`` in ``cameras`` ('' = the front camera, 0); a problem for ``name`` if unknown."""
    if value == "":
        return 0
    for index, camera in enumerate(cameras):
        if camera.name == value:
            return index
    reader.fail(name, f"unknown camera {value!r}; cameras.names is {[c.name for c in cameras]}")
    return 0


def camera_list(reader: ValueReader, name: str, cameras: Sequence[CameraConfig]) -> tuple[int, ...]:
    """A list parameter of camera names → their indices, in the list's order; ``['']`` = every camera."""
    chosen = [n.strip() for n in reader.strings(name) if n.strip()]
    indices = tuple(camera_index(reader, name, cameras, n) for n in chosen) or tuple(range(len(cameras)))
    if len(set(indices)) != len(indices):
        reader.fail(name, f"names a camera twice: {chosen}")
    return indices


def planning_cameras(reader: ValueReader, cameras: Sequence[CameraConfig]) -> tuple[int, ...]:
    """``planning.cameras``: the cameras whose images go in the planning prompt; the front camera comes first
    (a plan is made on each new front image and carries its stamp)."""
    indices = camera_list(reader, "planning.cameras", cameras)
    if indices[0] != 0:
        reader.fail(
            "planning.cameras",
            f"must start with the front camera {cameras[0].name!r} (the first of cameras.names), "
            f"got {[cameras[i].name for i in indices]}",
        )
        return tuple(range(len(cameras)))
    return indices


def planning_template(reader: ValueReader, cameras: Sequence[CameraConfig], indices: Sequence[int]) -> str:
    """``prompt.template``: a built-in name or a custom text with one ``<image>`` per planning camera."""
    template = reader.text("prompt.template")
    try:
        text = resolve_planning_template(template)
    except ValueError as exc:
        reader.fail("prompt.template", str(exc))
        return "navsim"
    count = text.count(IMAGE_PLACEHOLDER)
    if count != len(indices):
        names = [cameras[i].name for i in indices]
        reader.fail(
            "prompt.template",
            f"has {count} {IMAGE_PLACEHOLDER} placeholder(s) but {len(indices)} camera(s) go in the planning "
            f"prompt ({', '.join(names)}); write a custom template with one {IMAGE_PLACEHOLDER} per camera, in "
            "that order, or list fewer in planning.cameras",
        )
    return template
