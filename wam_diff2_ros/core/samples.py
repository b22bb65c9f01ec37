"""The sensor samples the ROS layer hands to the core, and the problems that make one unusable.

ROS-free. :class:`InputError` is raised for an unusable sample (the caller drops it); :class:`InputProblem`
names an input that cannot be used now, with :func:`problem_kind` (the reason without numbers) as its key for
throttled warnings.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .frames import EgoPose
from .prompts import NavigationCommand


class InputError(ValueError):
    """A sensor sample that cannot be used (the message says why); the caller drops it."""


def _finite(name: str, *values: float) -> None:
    for value in values:
        if not math.isfinite(value):
            raise InputError(f"{name} contains a non-finite value ({value})")


class LazyImage:
    """An image decoded on first use (and only once): callbacks store messages, the worker decodes.

    ``load`` returns an HxWx3 uint8 RGB array or raises (any exception becomes :class:`InputError`).
    """

    def __init__(self, load: Callable[[], np.ndarray]) -> None:
        self._load: Callable[[], np.ndarray] | None = load
        self._image: np.ndarray | None = None
        self._error: InputError | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, image: np.ndarray) -> LazyImage:
        """An already decoded image."""
        lazy = cls(lambda: image)
        lazy.get()
        return lazy

    def get(self) -> np.ndarray:
        """The decoded RGB array (raises :class:`InputError` with the decoder's reason)."""
        with self._lock:
            if self._image is None and self._error is None:
                assert self._load is not None
                try:
                    image = np.asarray(self._load())
                    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
                        raise InputError(f"decoder returned {image.dtype} {image.shape}, not HxWx3 uint8")
                    if image.shape[0] == 0 or image.shape[1] == 0:
                        raise InputError(f"image has no pixels ({image.shape[1]}x{image.shape[0]})")
                    self._image = image
                except InputError as exc:
                    self._error = exc
                except Exception as exc:  # a decoder may raise anything; the message keeps its reason
                    self._error = InputError(f"{type(exc).__name__}: {exc}")
                self._load = None  # release the message
            if self._error is not None:
                raise self._error
            assert self._image is not None
            return self._image

    @property
    def decoded(self) -> bool:
        """True once decoding has been attempted."""
        return self._load is None


@dataclass(frozen=True)
class ImageSample:
    """One camera image as received: header stamp, receive time, frame and a lazily decoded picture."""

    stamp_ns: int
    receive_ns: int
    frame_id: str
    image: LazyImage
    encoding: str = ""


@dataclass(frozen=True)
class OdometrySample:
    """Ego velocity (m/s, child frame: x forward, y left) and yaw rate (rad/s) at ``stamp_ns``, and the ego
    pose in the odometry's fixed frame (for plans in that frame)."""

    stamp_ns: int
    receive_ns: int
    vx: float
    vy: float
    yaw_rate: float = 0.0
    pose: EgoPose | None = None  # base_link in the odometry's header frame; None when unusable

    def __post_init__(self) -> None:
        _finite("odometry twist", self.vx, self.vy, self.yaw_rate)


@dataclass(frozen=True)
class AccelerationSample:
    """Ego linear acceleration (m/s², base_link: x forward, y left) at ``stamp_ns``."""

    stamp_ns: int
    receive_ns: int
    ax: float
    ay: float

    def __post_init__(self) -> None:
        _finite("acceleration", self.ax, self.ay)


@dataclass(frozen=True)
class CommandSample:
    """A navigation command; ``stamp_ns`` is the header stamp, or the receive time for a header-less one."""

    command: NavigationCommand
    stamp_ns: int
    receive_ns: int


_OBJECT_REPR_RE = re.compile(r"<[A-Za-z_][\w.]* object at 0x[0-9A-Fa-f]+>")
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def clean_reason(text: str) -> str:
    """``text`` without object reprs such as ``<_io.BytesIO object at 0x7ff6…>`` (a decoder's error message
    names its buffer): they change every time and mean nothing to a reader."""
    return _OBJECT_REPR_RE.sub("the data", str(text))


_QUOTED_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def problem_kind(text: str) -> str:
    """The kind of a problem message, for throttling and change detection: the text with every number,
    quoted snippet and object repr replaced, so "newest image is 24354 ms old" and "... 24861 ms old" (or
    "unknown navigation command 'x'" and "... 'y'") are one kind."""
    return _NUMBER_RE.sub("#", _QUOTED_RE.sub("'…'", clean_reason(text)))


@dataclass(frozen=True)
class InputProblem:
    """Why an input cannot be used now: ``input`` names it (``image_0 (front)``, ``odometry``, ...).

    ``reason`` is cleaned of object reprs; :attr:`kind` (input + reason without numbers) identifies the
    problem for throttled warnings while the numbers in the reason keep changing."""

    input: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", clean_reason(self.reason))

    @property
    def kind(self) -> str:
        """``input: reason`` with numbers replaced by ``#``."""
        return f"{self.input}: {problem_kind(self.reason)}"

    def __str__(self) -> str:
        return f"{self.input}: {self.reason}"
