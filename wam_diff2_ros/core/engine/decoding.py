"""Block-diffusion decoding of WAM-Diff2, the reference algorithm step for step.

The response is produced `block_size` tokens at a time. The prompt is prefilled into a KV cache under a
block-causal mask (a token sees its own block and all earlier ones; padding is masked out of the prompt).
Every response block starts as mask tokens and is denoised for up to `denoising_steps` steps: the block
attends to the cache and to itself, each position proposes a token (argmax, or a temperature / top-k /
top-p sample) with its probability, and a remasking strategy decides which masked positions take their
proposal. Positions still masked after the last step take the last proposal. A commit pass then writes the
finished block into the cache. A sample is finished once a block of it contains EOS; finished samples emit
EOS; decoding stops when every sample is finished or the token budget is spent.

Every tensor operation that affects which token wins (softmax in the model dtype, comparisons against the
threshold in that dtype, `torch.topk` tie-breaking per sample, random draws) follows the reference, so the
same weights give the same tokens. In bfloat16 the threshold 0.9 therefore acts as bf16(0.9) = 0.8984375.

The rules (remasking, stopping; sampling in sampling.py) are defined once, here; a runner executes the steps
(`runners.Runner`: `runners.ExactRunner`, the reference's `DynamicCache` and full logits, or `fast.FastRunner`,
static cache, masked-row logits on CPU, CUDA graphs), chosen by `DecodeConfig.engine` in one place,
`selection.Runners.select`. The block loop always has a deadline (deadline.py; `NoDeadline` without one) and
reports its timing and token confidences through observers (observers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..model import BlockDiffusionBackbone
from ..timing import StageTiming
from ..tokens import EOS_TOKEN_ID, MASK_TOKEN_ID
from .deadline import Clock, DeadlineBudget, NoDeadline, blocks_to_share, deadline_for
from .observers import StageClock, TokenConfidence
from .runners import Runner
from .sampling import RowSampling, SamplingParams
from .selection import Runners

ENGINES = ("auto", "exact", "fast", "fused")  # what each one runs: selection.py
REMASKING_STRATEGIES = ("low_confidence_dynamic", "low_confidence_static", "sequential")


class DecodeConfigError(ValueError):
    """A decoding parameter out of range."""


class DecodeCancelledError(RuntimeError):
    """Decoding was stopped between two denoising steps because a cancel was requested."""


@dataclass(frozen=True)
class DecodeConfig:
    """Decoding parameters (defaults: the reference inference script's)."""

    max_new_tokens: int = 128
    block_size: int = 32
    denoising_steps: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    remasking_strategy: str = "low_confidence_dynamic"
    confidence_threshold: float = 0.9
    seed: int | None = None
    engine: str = "auto"  # exact | fast | fused | auto (selection.resolve_engine)
    cuda_graphs: bool = True  # fast engine on CUDA: replay captured denoising steps
    triton_kernels: bool = False  # fast engine on CUDA: bit-identical Triton element-wise kernels (unproven on GPU)
    deadline_ms: float = 0.0  # plan deadline from the plan's start (deadline.py); 0 = none
    mask_token_id: int = MASK_TOKEN_ID
    eos_token_id: int = EOS_TOKEN_ID

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "confidence_threshold", "deadline_ms"):
            value = getattr(self, name)
            if value != value:  # NaN
                raise DecodeConfigError(f"{name} is NaN")
        checks: list[tuple[bool, str]] = [
            (self.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {self.max_new_tokens}"),
            (self.block_size >= 1, f"block_size must be >= 1, got {self.block_size}"),
            (self.denoising_steps >= 1, f"denoising_steps must be >= 1, got {self.denoising_steps}"),
            (self.temperature >= 0.0, f"temperature must be >= 0, got {self.temperature}"),
            (self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}"),
            (0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}"),
            (
                0.0 < self.confidence_threshold <= 1.0,
                f"confidence_threshold must be in (0, 1], got {self.confidence_threshold}",
            ),
            (
                self.remasking_strategy in REMASKING_STRATEGIES,
                f"remasking_strategy must be one of {', '.join(REMASKING_STRATEGIES)}; got {self.remasking_strategy!r}",
            ),
            (self.seed is None or self.seed >= 0, f"seed must be >= 0, got {self.seed}"),
            (self.engine in ENGINES, f"engine must be one of {', '.join(ENGINES)}; got {self.engine!r}"),
            (
                0.0 <= self.deadline_ms < float("inf"),
                f"deadline_ms must be >= 0 (0 = none), got {self.deadline_ms}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise DecodeConfigError(message)

    @property
    def num_blocks(self) -> int:
        """Response blocks: `max_new_tokens` rounded up to whole blocks."""
        return -(-self.max_new_tokens // self.block_size)

    def with_overrides(self, **changes: Any) -> DecodeConfig:
        """A validated copy with some fields changed (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass
class DecodeOutput:
    """Result of decoding a batch."""

    sequences: torch.Tensor  # [B, num_blocks * block_size], what the reference returns (mask id where undecoded)
    token_ids: list[list[int]]  # per sample, cut before the first EOS
    steps_per_block: list[int]  # denoising forwards run per decoded block (shared by the batch)
    finished: list[bool]  # sample produced EOS within the budget
    timing: StageTiming = field(default_factory=StageTiming)  # no preprocessing: the engine adds it
    # per sample, aligned with token_ids: the probability with which each committed token won
    token_confidence: list[list[float]] = field(default_factory=list)
    early_tokens: list[int] = field(default_factory=list)  # per sample: committed early for the deadline
    deadline_met: bool = True  # decoding finished within config.deadline_ms of the plan's start (or no deadline)


def transfer_schedule(block_size: int, steps: int) -> list[int]:
    """Tokens to unmask per step for the static strategies: an even split, remainder to the first steps."""
    base, remainder = divmod(block_size, steps)
    return [base + (1 if i < remainder else 0) for i in range(steps)]


def select_transfers(
    strategy: str,
    masked: torch.Tensor,
    confidence: torch.Tensor,
    count: int,
    threshold: float,
    finished: torch.Tensor,
) -> torch.Tensor:
    """Boolean [B, L] of masked positions that take their proposal this step (the remasking rule, batched).

    `masked` marks still-masked positions, `confidence` the proposal probabilities, `count` the static
    per-step budget; rows of `finished` samples take nothing. Dynamic: every masked position with
    confidence >= threshold (compared in the confidence dtype), else the single most confident one. Static:
    the `count` most confident (all of them when fewer are masked). Sequential: the first `count` masked
    positions. Runs on the device for the whole batch without reading anything back; `torch.topk` over the
    batch picks per row exactly what the reference's per-sample `torch.topk` picks (same kernel, row by row).
    """
    masked = masked & ~finished[:, None]
    if strategy == "sequential":
        return masked & (masked.cumsum(dim=1) <= count)
    scores = torch.where(masked, confidence, torch.full_like(confidence, -torch.inf))
    if strategy == "low_confidence_static":
        if count <= 0:
            return torch.zeros_like(masked)
        # a row with at most `count` masked positions takes all of them; otherwise the top `count` scores
        index = torch.topk(scores, min(count, scores.shape[1]), dim=1).indices
        top = torch.zeros_like(masked).scatter_(1, index, True)
        return masked & top
    confident = scores >= threshold
    best = torch.zeros_like(masked).scatter_(1, torch.topk(scores, 1, dim=1).indices, True)
    fallback = ~confident.any(dim=1, keepdim=True) & masked.any(dim=1, keepdim=True)
    return confident | (best & fallback)


def _block_causal_mask(prompt_len: int, num_blocks: int, block_size: int, batch: int, device: torch.device):
    """[B, 1, T, T] boolean mask: query block id >= key block id (prompt cut into blocks from its start)."""
    total = prompt_len + num_blocks * block_size
    positions = torch.arange(total, device=device)
    prompt_blocks = -(-prompt_len // block_size)
    block_ids = torch.where(
        positions < prompt_len, positions // block_size, prompt_blocks + (positions - prompt_len) // block_size
    ).to(torch.int32)
    mask = (block_ids.unsqueeze(1) >= block_ids.unsqueeze(0)).unsqueeze(0).unsqueeze(0)
    return mask.expand(batch, 1, total, total)


def block_diffusion_decode(
    backbone: BlockDiffusionBackbone,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    pixel_values: torch.Tensor | None,
    image_grid_thw: torch.Tensor | None,
    config: DecodeConfig,
    synchronize: Callable[[], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    observe: Callable[[str], None] | None = None,
    started_ns: int | None = None,
    clock: Clock | None = None,
    expected_blocks: int | None = None,
    runners: Runners | None = None,
    row_temperatures: tuple[float, ...] | None = None,
) -> DecodeOutput:
    """Decode a (padded) prompt batch with block diffusion; see the module docstring.

    `config.engine` chooses the runner that executes the steps (selection.py); the rules here are the same for
    every engine. Per denoising step at most one device->host read (is anything still masked?), per block one more
    (which samples are finished). `cancel` is polled before every step (a host-side flag); True stops the decode with
    `DecodeCancelledError`. `observe` is told each phase as it starts (observers.StageClock). `runners`: the
    backbone's runners kept across decodes (None builds them for this call). With `config.deadline_ms` > 0 the steps
    are compressed to finish by `started_ns + deadline_ms` on `clock` (deadline.py), the time shared among
    `expected_blocks` blocks (default: every block up to `max_new_tokens`); without one the clock is not read.
    `row_temperatures` (candidate batches): a one-prompt batch prefilled once, then one row per temperature
    (`_broadcast_rows`); a row at 0 gives the prompt's greedy answer.
    """
    device = input_ids.device
    batch, prompt_len = input_ids.shape
    block_size, num_blocks, mask_id = config.block_size, config.num_blocks, config.mask_token_id
    attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    generator = None if config.seed is None else torch.Generator(device=device).manual_seed(config.seed)
    runner = (runners or Runners(backbone)).select(config.engine, config.cuda_graphs, config.triton_kernels, device)
    stages = StageClock(synchronize, observe)
    deadline = deadline_for(config.deadline_ms, started_ns, clock)

    full_mask = _block_causal_mask(prompt_len, num_blocks, block_size, batch, device)
    valid = attention_mask.to(device=device).bool()
    prompt_mask = full_mask[:, :, :prompt_len, :prompt_len] & valid[:, None, None, :] & valid[:, None, :, None]
    prompt_positions, rope_deltas = backbone.rope_index(input_ids, attention_mask, image_grid_thw)
    stages.announce("prefill")
    capacity = prompt_len + num_blocks * block_size
    vision_s = runner.prefill(input_ids, prompt_mask, prompt_positions, pixel_values, image_grid_thw, capacity)
    sampling: SamplingParams = config
    if row_temperatures is not None:  # candidate rows: the one prefilled prompt broadcast to every row
        batch, full_mask, rope_deltas, sampling = _broadcast_rows(
            runner, row_temperatures, prompt_len, full_mask, rope_deltas, config
        )
    stages.prefilled(vision_s)

    response = torch.full((batch, num_blocks * block_size), mask_id, dtype=input_ids.dtype, device=device)
    confidences = TokenConfidence(batch, num_blocks * block_size, block_size, device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    any_finished = False  # host copy of finished.any(), read once per block
    eos_block = torch.full((batch, block_size), config.eos_token_id, dtype=input_ids.dtype, device=device)
    schedule = transfer_schedule(block_size, config.denoising_steps)
    steps_per_block: list[int] = []
    for block in range(num_blocks):
        block_start, block_end = prompt_len + block * block_size, prompt_len + (block + 1) * block_size
        with stages.stage("denoise"):
            tokens = torch.full((batch, block_size), mask_id, dtype=input_ids.dtype, device=device)
            if any_finished:
                tokens = torch.where(finished[:, None], eos_block, tokens)
            positions = _block_positions(block_start, block_size, rope_deltas, batch, device)
            step_mask = full_mask[:, :, block_start:block_end, :block_end]
            proposal, confidence = tokens, torch.zeros(tokens.shape, dtype=backbone.dtype, device=device)
            confidences.open_block()
            deadline.open_block(blocks_to_share(block, num_blocks, expected_blocks))
            steps_run = config.denoising_steps
            for step in range(config.denoising_steps):
                if cancel is not None and cancel():
                    raise DecodeCancelledError("decoding cancelled")
                stages.announce("step")
                masked = tokens == mask_id
                if any_finished:
                    masked &= ~finished[:, None]
                rows = runner.open_rows(masked)
                if rows is None:
                    steps_run = step
                    deadline.end_steps()
                    break
                deadline.begin_step()
                proposal, confidence = runner.propose(
                    tokens, positions, step_mask, block_start, rows, sampling, generator
                )
                transfer = select_transfers(
                    config.remasking_strategy, masked, confidence, schedule[step], config.confidence_threshold, finished
                )
                transfer = deadline.compress(config.remasking_strategy, masked, confidence, transfer)  # the policy
                tokens = torch.where(transfer, proposal, tokens)
                confidences.taken(transfer, confidence)
            else:
                deadline.abandon_step()
            steps_per_block.append(steps_run)
            stages.announce("block")
            leftover = (tokens == mask_id) & ~finished[:, None]
            tokens = torch.where(leftover, proposal, tokens)
            confidences.taken(leftover, confidence)
            tokens = torch.where(finished[:, None], eos_block, tokens)
            response[:, block * block_size : (block + 1) * block_size] = tokens
            confidences.close_block(block)
            finished |= (tokens == config.eos_token_id).any(dim=1)
            finished_rows = finished.tolist()  # the one read per block
            any_finished = any(finished_rows)
        if all(finished_rows) or block == num_blocks - 1:
            break  # (the reference also commits the last block; nothing reads that cache entry)
        with deadline.commit(), stages.stage("commit", phase="commit"):
            runner.commit(tokens, positions, step_mask, block_start)
    return _decode_output(response, confidences, finished, steps_per_block, deadline, stages.finish(), config)


def _broadcast_rows(
    runner: Runner,
    temperatures: tuple[float, ...],
    prompt_len: int,
    full_mask: torch.Tensor,
    rope_deltas: torch.Tensor,
    config: DecodeConfig,
) -> tuple[int, torch.Tensor, torch.Tensor, RowSampling]:
    """A one-prompt batch's prefilled cache, mask and rope deltas broadcast to one row per temperature, and the
    per-row sampling (candidate batches)."""
    if full_mask.shape[0] != 1:
        raise ValueError(f"row_temperatures need a one-prompt batch, got {full_mask.shape[0]} prompts")
    rows = len(temperatures)
    runner.expand(rows, prompt_len)
    sampling = RowSampling(tuple(float(t) for t in temperatures), config.top_k, config.top_p)
    return rows, full_mask.expand(rows, -1, -1, -1), rope_deltas.expand(rows, -1), sampling


def _block_positions(block_start: int, block_size: int, rope_deltas: torch.Tensor, batch: int, device) -> torch.Tensor:
    """Rope positions [3, B, L] of a response block: its sequence indices plus each sample's rope delta."""
    positions = torch.arange(block_start, block_start + block_size, device=device).view(1, -1).expand(batch, -1)
    positions = positions + rope_deltas.to(device=device, dtype=positions.dtype)
    return positions.unsqueeze(0).expand(3, -1, -1)


def _decode_output(
    response: torch.Tensor,
    confidences: TokenConfidence,
    finished: torch.Tensor,
    steps_per_block: list[int],
    deadline: NoDeadline | DeadlineBudget,
    timing: StageTiming,
    config: DecodeConfig,
) -> DecodeOutput:
    """The decode's result: per sample the tokens before the first EOS with their confidences (one read for the
    confidences and the early counts: exact as float32, the counts are at most a few thousand)."""
    mask_id, eos_id = config.mask_token_id, config.eos_token_id
    early = deadline.early_tokens(response.shape[0], response.device)
    read = torch.cat([confidences.values, early[:, None].to(torch.float32)], dim=1).tolist()
    token_ids: list[list[int]] = []
    token_confidence: list[list[float]] = []
    for row, values in zip(response.tolist(), read, strict=True):
        end = row.index(eos_id) if eos_id in row else len(row)
        kept = [i for i in range(end) if row[i] != mask_id]
        token_ids.append([row[i] for i in kept])
        token_confidence.append([values[i] for i in kept])
    return DecodeOutput(
        sequences=response,
        token_ids=token_ids,
        steps_per_block=steps_per_block,
        finished=finished.tolist(),
        token_confidence=token_confidence,
        early_tokens=[int(values[-1]) for values in read],
        deadline_met=deadline.met(),
        timing=timing,
    )
