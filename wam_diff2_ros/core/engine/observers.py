"""What the block loop reports besides its tokens, kept out of its rules: the stage timing and the phases
(`StageClock`), and the probability with which every committed token won (`TokenConfidence`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch

from ..timing import StageTiming


class StageClock:
    """Seconds per decoding stage (host clock, the device synchronised at each stage's end) and the phases as they
    start (prefill, step, block, commit, done) told to `observe` (for instruments, such as the benchmark's counters).
    Created at the decode's start: it synchronises the device and starts the total."""

    def __init__(
        self, synchronize: Callable[[], None] | None = None, observe: Callable[[str], None] | None = None
    ) -> None:
        self.sync = synchronize or (lambda: None)
        self.announce = observe or (lambda phase: None)
        self.seconds = {"vision": 0.0, "prefill": 0.0, "denoise": 0.0, "commit": 0.0}
        self.sync()
        self.started = time.perf_counter()

    def prefilled(self, vision_s: float) -> None:
        """The prefill ended (the vision encoder took `vision_s` of it): the time since the start, less vision."""
        self.sync()
        self.seconds["vision"] = vision_s
        self.seconds["prefill"] = time.perf_counter() - self.started - vision_s

    @contextlib.contextmanager
    def stage(self, name: str, phase: str | None = None) -> Iterator[None]:
        """Add the time of the body, up to a device synchronisation at its end, to stage `name`; `phase` is told
        first."""
        begun = time.perf_counter()
        if phase is not None:
            self.announce(phase)
        yield
        self.sync()
        self.seconds[name] += time.perf_counter() - begun

    def finish(self) -> StageTiming:
        """The stages and the total so far; tells `done`."""
        total = time.perf_counter() - self.started
        self.announce("done")
        return StageTiming.from_seconds(**self.seconds, total=total)


class TokenConfidence:
    """Per response position the probability with which its token won ([B, positions] float32 on the device; 1 where
    nothing was proposed), told by the block loop which positions took their proposal."""

    def __init__(self, batch: int, positions: int, block_size: int, device: torch.device) -> None:
        self.values = torch.ones((batch, positions), dtype=torch.float32, device=device)
        self.block_size = block_size
        self.block = self.values[:, :block_size]

    def open_block(self) -> None:
        """A block starts: none of its positions has won yet."""
        self.block = torch.ones_like(self.block)

    def taken(self, transfer: torch.Tensor, confidence: torch.Tensor) -> None:
        """The positions of `transfer` [B, L] took their proposal with probability `confidence` [B, L]."""
        self.block = torch.where(transfer, confidence.float(), self.block)

    def close_block(self, block: int) -> None:
        """Block number `block` is final."""
        self.values[:, block * self.block_size : (block + 1) * self.block_size] = self.block
