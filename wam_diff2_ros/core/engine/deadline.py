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

import contextlib
import math
import time
from collections.abc import Callable, Iterator

import torch

Clock = Callable[[], int]
DEFAULT_CLOCK: Clock = time.monotonic_ns
STEP_COST_WEIGHT = 0.5  # weight of the newest measured step in the running step cost


class NoDeadline:
    """The deadline of a plan without one (the block loop always has a deadline object): nothing is measured,
    nothing forced, the clock is never read."""

    def open_block(self, blocks_left: int) -> None:
        """A block starts (nothing to share)."""

    def begin_step(self) -> int | None:
        """A step is about to propose: no limit."""
        return None

    def end_steps(self) -> None:
        """The block found nothing left to unmask."""

    def abandon_step(self) -> None:
        """The block ran out of steps."""

    def compress(self, strategy: str, masked: torch.Tensor, confidence: torch.Tensor, transfer: torch.Tensor):
        """The step's transfers as the remasking rule chose them."""
        return transfer

    @contextlib.contextmanager
    def commit(self) -> Iterator[None]:
        """Around a commit pass: nothing measured."""
        yield

    def early_tokens(self, batch: int, device: torch.device) -> torch.Tensor:
        """Per sample the tokens committed early for the deadline ([B] int64): none."""
        return torch.zeros(batch, dtype=torch.int64, device=device)

    def met(self) -> bool:
        """A plan without a deadline is never late."""
        return True


def deadline_for(deadline_ms: float, started_ns: int | None = None, clock: Clock | None = None):
    """The block loop's deadline object: a `DeadlineBudget` for `deadline_ms` > 0, else `NoDeadline`."""
    return DeadlineBudget(deadline_ms, started_ns, clock) if deadline_ms > 0 else NoDeadline()


class DeadlineBudget:
    """The step allowance of one plan's blocks under a deadline (see the module docstring); the block loop calls
    the same methods on it as on `NoDeadline`."""

    def __init__(self, deadline_ms: float, started_ns: int | None = None, clock: Clock | None = None) -> None:
        self.clock = clock or DEFAULT_CLOCK
        self.started_ns = self.clock() if started_ns is None else int(started_ns)
        self.deadline_ns = self.started_ns + int(deadline_ms * 1e6)
        self.step_ns: float | None = None
        self.commit_ns: float | None = None
        self.slice_end_ns = self.deadline_ns
        self._step_opened: int | None = None
        self.steps_left: int | None = None  # what the last `begin_step` allowed
        self.early: torch.Tensor | None = None  # per sample the tokens forced early so far ([B] int64, on the device)

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
            self.steps_left = 1
        elif not self.step_ns:
            self.steps_left = None
        else:
            self.steps_left = max(1, math.floor(left_ns / self.step_ns))
        return self.steps_left

    def end_steps(self) -> None:
        """The block found nothing left to unmask: the last step's cost is known now."""
        self._close_step()
        self._step_opened = None

    def abandon_step(self) -> None:
        """The block ran out of steps: its last step is not measured (its end is not observed alone)."""
        self._step_opened = None

    def compress(self, strategy: str, masked: torch.Tensor, confidence: torch.Tensor, transfer: torch.Tensor):
        """The step's transfers (`transfer`, chosen by the remasking rule among the still-masked positions `masked`)
        plus what fills the block in the steps left when fewer fit than the block has positions (`forced_transfers`);
        the positions forced beyond the rule's are counted in `early`. Runs on the device, no reads."""
        if self.steps_left is None or self.steps_left >= masked.shape[1]:
            return transfer
        forced = forced_transfers(strategy, masked, confidence, self.steps_left)
        early = (forced & ~transfer).sum(dim=1)
        self.early = early if self.early is None else self.early + early
        return transfer | forced

    @contextlib.contextmanager
    def commit(self) -> Iterator[None]:
        """Around a commit pass (which ends with the device synchronised): its cost is measured."""
        opened = self.clock()
        yield
        self.commit_ns = float(self.clock() - opened)

    def early_tokens(self, batch: int, device: torch.device) -> torch.Tensor:
        """Per sample the tokens committed early for the deadline ([B] int64, on the device)."""
        return torch.zeros(batch, dtype=torch.int64, device=device) if self.early is None else self.early

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
