"""Deadline-aware decoding: how many denoising steps a block may still take, from the measured cost of a step.

A plan with a deadline (`DecodeConfig.deadline_ms` > 0) starts its clock when the plan starts (preprocessing
included: the caller passes that instant in). At the start of each response block the block gets an equal
slice of the time left, after reserving one commit per block boundary still ahead:

    slice = (deadline - now - commits_left * commit_cost) / blocks_left

where `blocks_left` counts the blocks the answer is expected to take (the engine passes how many the previous
answer took; without that, every block up to `max_new_tokens`: the decoder cannot know where EOS will fall).
A block past the expected count gets all the time left; time a block leaves unused goes to the next slice.
Before every step the decoder asks how many steps still fit in the block's slice at the current step cost:
`floor((slice_end - now) / step_cost)`, at least 1.
When that is fewer than the block still needs, the step commits at least `ceil(masked / steps_left)` of the
masked positions (the most confident first; left to right for `sequential`) on top of what the remasking rule
commits, so the block is full after at most `steps_left` steps; a step with `steps_left == 1` fills the block.
A block is never left half-masked.

The step cost is the time between two consecutive "is anything masked?" reads of the decoder (that read waits
for the device, so the interval covers the whole step), averaged with weight 1/2 on the newest
(`STEP_COST_WEIGHT`); the commit cost is measured around the commit pass. Until the first step of a plan is
measured nothing is compressed (there is no cost to go by) unless the deadline has already passed. When even
one step per block does not fit, every remaining block gets exactly one step: the plan is finished as fast as
the decoder can and reported late (`deadline_met` false); the caller decides what a late plan is worth (the node
publishes it marked late; its `planning.max_plan_age_s` gate still applies).

The clock is a callable returning nanoseconds (`time.monotonic_ns` by default), injectable so tests can give
each step an exact cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

Clock = Callable[[], int]
DEFAULT_CLOCK: Clock = time.monotonic_ns
STEP_COST_WEIGHT = 0.5  # weight of the newest measured step in the running step cost


class DeadlineBudget:
    """The step allowance of one plan's blocks under a deadline (see the module docstring)."""

    def __init__(self, deadline_ms: float, started_ns: int | None = None, clock: Clock | None = None) -> None:
        self.clock = clock or DEFAULT_CLOCK
        self.started_ns = self.clock() if started_ns is None else int(started_ns)
        self.deadline_ns = self.started_ns + int(deadline_ms * 1e6)
        self.step_ns: float | None = None
        self.commit_ns: float | None = None
        self.slice_end_ns = self.deadline_ns
        self._step_opened: int | None = None
        self._commit_opened: int | None = None

    def open_block(self, blocks_left: int) -> None:
        """Give the block about to start its slice of the time left (`blocks_left` includes it)."""
        now = self.clock()
        commit = self.commit_ns if self.commit_ns is not None else (self.step_ns or 0.0)
        reserved = (blocks_left - 1) * commit
        self.slice_end_ns = now + int((self.deadline_ns - now - reserved) / blocks_left)

    def begin_step(self) -> int | None:
        """A step is about to propose: record the previous step's cost; return how many steps, this one
        included, still fit in the block's slice (None: no limit known yet)."""
        now = self._close_step()
        self._step_opened = now
        left_ns = self.slice_end_ns - now
        if left_ns <= 0:
            return 1
        if not self.step_ns:
            return None
        return max(1, math.floor(left_ns / self.step_ns))

    def end_steps(self) -> None:
        """The block found nothing left to unmask: the last step's cost is known now."""
        self._close_step()
        self._step_opened = None

    def abandon_step(self) -> None:
        """The block ran out of steps: its last step is not measured (its end is not observed alone)."""
        self._step_opened = None

    def begin_commit(self) -> None:
        """A commit pass starts."""
        self._commit_opened = self.clock()

    def end_commit(self) -> None:
        """The commit pass finished (after the device synchronised): record its cost."""
        if self._commit_opened is not None:
            self.commit_ns = float(self.clock() - self._commit_opened)
            self._commit_opened = None

    def met(self) -> bool:
        """Whether now is still within the deadline."""
        return self.clock() <= self.deadline_ns

    def _close_step(self) -> int:
        now = self.clock()
        if self._step_opened is not None:
            cost = float(now - self._step_opened)
            weight = STEP_COST_WEIGHT
            self.step_ns = cost if self.step_ns is None else weight * cost + (1 - weight) * self.step_ns
        return now


def blocks_to_share(block: int, num_blocks: int, expected_blocks: int | None) -> int:
    """How many blocks, from `block` on, the time left is shared among: up to `expected_blocks` (when known,
    e.g. what the previous answer took) or every block up to `max_new_tokens`; at least this one."""
    total = num_blocks if expected_blocks is None else min(num_blocks, expected_blocks)
    return max(1, total - block)


def forced_transfers(strategy: str, masked: torch.Tensor, confidence: torch.Tensor, steps_left: int) -> torch.Tensor:
    """Boolean [B, L]: per row at least `ceil(masked / steps_left)` masked positions, the most confident first
    (`sequential`: left to right), so that `steps_left` steps fill the block. Runs on the device, no reads."""
    remaining = masked.sum(dim=1, keepdim=True)
    quota = torch.div(remaining + (steps_left - 1), steps_left, rounding_mode="floor")
    if strategy == "sequential":
        return masked & (masked.cumsum(dim=1) <= quota)
    scores = torch.where(masked, confidence, torch.full_like(confidence, -torch.inf))
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    places = torch.arange(order.shape[1], device=order.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, places)  # each position's place in the order
    return masked & (rank < quota)
