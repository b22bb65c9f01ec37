"""How a denoising step proposes tokens: per position the argmax (or a temperature / top-k / top-p sample) and
its probability, exactly as the reference computes them (softmax in the model dtype, `torch.argmax`'s tie-break,
one uniform draw per position). Both engines' runners call `sample_tokens`; the remasking rules that decide which
proposals are taken live in decoding.py.
"""

from __future__ import annotations

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
