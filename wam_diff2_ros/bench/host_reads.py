"""Count device->host reads (the operations that make the host wait for the device) inside a block of code.

`count_host_reads()` wraps the tensor methods that hand device data to Python (`item`, `tolist`, `__bool__`,
`__int__`, `__float__`, `__index__`, `numpy`, `cpu`, `nonzero`, and `torch.nonzero`) for the duration of a
`with` block and counts the outermost calls (a `tolist` that internally calls `item` counts once). On CPU
nothing really waits, but the same calls are synchronisations on CUDA and NPU, so the count is what the
decoder would cost there. Not thread-safe: use it around one decode at a time.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

_METHODS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu", "nonzero")


class HostReadCounter:
    """Number of device->host reads seen, optionally split by a label set with `phase`."""

    def __init__(self) -> None:
        self.total = 0
        self.by_phase: dict[str, int] = {}
        self.phase = "other"
        self._depth = 0

    def _hit(self) -> None:
        self.total += 1
        self.by_phase[self.phase] = self.by_phase.get(self.phase, 0) + 1


@contextlib.contextmanager
def count_host_reads() -> Iterator[HostReadCounter]:
    """Patch the reading tensor methods while the block runs; yields the counter."""
    counter = HostReadCounter()
    originals: dict[str, Any] = {name: getattr(torch.Tensor, name) for name in _METHODS}
    original_nonzero = torch.nonzero

    def wrap(function: Any) -> Any:
        @functools.wraps(function)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if counter._depth == 0:
                counter._hit()
            counter._depth += 1
            try:
                return function(*args, **kwargs)
            finally:
                counter._depth -= 1

        return counted

    try:
        for name, function in originals.items():
            setattr(torch.Tensor, name, wrap(function))
        torch.nonzero = wrap(original_nonzero)
        yield counter
    finally:
        for name, function in originals.items():
            setattr(torch.Tensor, name, function)
        torch.nonzero = original_nonzero
