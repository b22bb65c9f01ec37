"""How a denoising step proposes tokens: per position the argmax (or a temperature / top-k / top-p sample) and
its probability, exactly as the reference computes them (softmax in the model dtype, `torch.argmax`'s tie-break,
one uniform draw per position). Both engines' runners call `sample_tokens`; the remasking rules that decide which
proposals are taken live in decoding.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class SamplingParams(Protocol):
    """The decoding fields a runner samples with (`decoding.DecodeConfig` has them)."""

    @property
    def temperature(self) -> float: ...

    @property
    def top_k(self) -> int: ...

    @property
    def top_p(self) -> float: ...


ARGMAX_WINDOW = 1024  # first_max_index: the row segments whose maxima locate each row's maximum


def first_max_index(rows: torch.Tensor) -> torch.Tensor:
    """Per row of `rows` [N, V] the index of its first maximum ([N, 1]), exactly as `torch.argmax` (a NaN counts
    as the maximum). On CPU, where `argmax` over 151,936 columns is 9-29x slower than `amax`, the maxima of
    1024-wide segments pick each row's first segment holding its maximum, and `argmax` runs on that segment only.
    """
    _, vocab = rows.shape
    if rows.device.type != "cpu" or vocab < 2 * ARGMAX_WINDOW:
        return torch.argmax(rows, dim=-1, keepdim=True)
    whole = vocab - vocab % ARGMAX_WINDOW
    maxima = rows[:, :whole].unflatten(1, (-1, ARGMAX_WINDOW)).amax(-1)  # amax propagates NaN, as argmax ranks it
    if whole < vocab:
        maxima = torch.cat([maxima, rows[:, whole:].amax(-1, keepdim=True)], dim=1)
    start = maxima.argmax(-1, keepdim=True) * ARGMAX_WINDOW  # the first segment holding the row's maximum
    # the last segment may be short: its window repeats the last column, after the real one, which argmax prefers
    columns = (start + torch.arange(ARGMAX_WINDOW, device=rows.device)).clamp_(max=vocab - 1)
    return start + rows.gather(1, columns).argmax(-1, keepdim=True)


def sample_tokens(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position a proposed token and its probability (shapes [B, L]), as the reference samples.

    Greedy (`temperature == 0`): argmax and its softmax probability. Otherwise logits / temperature,
    restricted to the top-k (or the top 1000 when only top-p is set), softmax, nucleus cut keeping the first
    token whose cumulative probability passes `top_p`, then inverse-CDF sampling with one uniform draw per
    position from `generator` (the global RNG when None), or the given `uniform` draws ([B * L, 1]).
    """
    batch, length, vocab = logits.shape
    flat = logits.reshape(-1, vocab)
    if temperature == 0:
        tokens = first_max_index(flat)
        probs = torch.softmax(flat, dim=-1)
        return tokens.view(batch, length), torch.gather(probs, -1, tokens).view(batch, length)

    scaled = flat / temperature
    if top_k > 0:
        keep = min(top_k, vocab)
    elif top_p < 1.0:
        keep = min(1000, vocab)
    else:
        keep = vocab
    candidate_ids: torch.Tensor | None = None
    if keep < vocab:
        scaled, candidate_ids = torch.topk(scaled, keep, dim=-1)
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        beyond = torch.cumsum(probs, dim=-1) > top_p
        drop = torch.zeros_like(beyond)
        drop[:, 1:] = beyond[:, :-1]  # keep the token that crosses top_p
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True).clamp(min=1e-8)
    cumulative = torch.cumsum(probs, dim=-1)
    if uniform is None:
        uniform = draw_uniform(probs.shape[0], probs.dtype, probs.device, generator)
    choice = (cumulative < uniform).sum(dim=-1, keepdim=True).long().clamp(max=probs.shape[-1] - 1)
    chosen_probs = torch.gather(probs, -1, choice)
    tokens = choice if candidate_ids is None else torch.gather(candidate_ids, -1, choice)
    return tokens.view(batch, length), chosen_probs.view(batch, length)


def draw_uniform(count: int, dtype: torch.dtype, device: torch.device, generator: torch.Generator | None):
    """The sampler's uniform draws for `count` positions ([count, 1]), one per position, in position order."""
    return torch.rand(count, 1, device=device, dtype=dtype, generator=generator)


@dataclass(frozen=True)
class RowSampling:
    """Sampling with one temperature per batch row (candidate batches: row 0 greedy, the others sampled);
    top-k / top-p shared. Each row follows `sample_tokens`' rules at its own temperature, with its own positions'
    uniform draws out of one draw per position of the whole batch (drawn when any row samples)."""

    row_temperatures: tuple[float, ...]
    top_k: int = 0
    top_p: float = 1.0

    @property
    def temperature(self) -> float:
        """Nonzero when any row samples (then the step draws its uniforms)."""
        return max(self.row_temperatures)


def _groups(sampling: RowSampling, row_of: list[int]) -> list[tuple[float, list[int]]]:
    """Positions by their row's temperature (position i lies in batch row `row_of[i]`)."""
    groups: dict[float, list[int]] = {}
    for position, row in enumerate(row_of):
        groups.setdefault(float(sampling.row_temperatures[row]), []).append(position)
    return list(groups.items())


def _take(values: torch.Tensor, index: list[int]) -> torch.Tensor:
    """`values` at `index` along dim 0: a view for a contiguous run of indices, else a copy."""
    if index == list(range(index[0], index[0] + len(index))):
        return values[index[0] : index[0] + len(index)]
    return values.index_select(0, torch.tensor(index, device=values.device))


def sample_batch(
    logits: torch.Tensor,
    sampling: SamplingParams,
    generator: torch.Generator | None = None,
    uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample_tokens` over a block's logits [B, L, V] with `sampling`'s temperature, or per row with a
    `RowSampling` (each row exactly as `sample_tokens` samples it alone at its temperature)."""
    if not isinstance(sampling, RowSampling):
        return sample_tokens(logits, sampling.temperature, sampling.top_k, sampling.top_p, generator, uniform)
    batch, length, _ = logits.shape
    if uniform is None and sampling.temperature != 0:
        uniform = draw_uniform(batch * length, logits.dtype, logits.device, generator)
    row_of = [row for row in range(batch) for _ in range(length)]
    tokens, probs = sample_flat(logits.reshape(batch * length, -1), row_of, sampling, uniform)
    return tokens.view(batch, length), probs.view(batch, length)


def sample_flat(
    logits: torch.Tensor, row_of: list[int], sampling: RowSampling, uniform: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position of flat logits [M, V] (position i in batch row `row_of[i]`) its proposal and probability
    ([M] each) at its row's temperature, as `sample_tokens` gives it; `uniform` [M, 1]: the positions' draws."""
    count = logits.shape[0]
    tokens = torch.empty(count, dtype=torch.int64, device=logits.device)
    probs = torch.empty(count, dtype=logits.dtype, device=logits.device)
    for temperature, chosen in _groups(sampling, row_of):
        draws = None if temperature == 0 or uniform is None else _take(uniform, chosen)
        group_tokens, group_probs = sample_tokens(
            _take(logits, chosen).unsqueeze(0), temperature, sampling.top_k, sampling.top_p, uniform=draws
        )
        index = torch.tensor(chosen, device=logits.device)
        tokens.index_copy_(0, index, group_tokens.reshape(-1))
        probs.index_copy_(0, index, group_probs.reshape(-1))
    return tokens, probs
