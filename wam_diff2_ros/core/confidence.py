"""Per-waypoint confidence from the decoder's per-token probabilities.

The decoder keeps, for every committed response token, the probability with which it won (the greedy
proposal's softmax probability, or the sampled token's probability). `token_char_spans` maps the tokens to
characters of the decoded text; the parser gives each waypoint's x and y numbers as character spans
(`PlanParse.spans`), so every waypoint gets the probabilities of the tokens that wrote its two numbers
(`waypoint_token_probabilities`). A waypoint's confidence is an aggregate of those (`AGGREGATES`):

- ``geomean`` (published): exp of the mean log-probability, the length-normalised joint probability of the
  tokens that wrote the pair: every digit counts, and a long number is not punished for its length.
- ``min``: the least sure token (a waypoint is wrong as soon as one of its digits is).
- ``product``: the joint probability of all the tokens (penalises long numbers).

`WAYPOINT_AGGREGATE` is the one published: on the demo model it ranked waypoints and plans by their error better
than the minimum on five of six measures (`docs/confidence.md` compares them). The plan's
confidence is the minimum over its waypoints: a plan is as trustworthy as its least trustworthy point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {
    "min": lambda values: min(values),
    "geomean": lambda values: math.exp(sum(math.log(max(v, 1e-12)) for v in values) / len(values)),
    "product": lambda values: math.prod(values),
}
WAYPOINT_AGGREGATE = "geomean"


def token_char_spans(decode: Callable[[list[int]], str], token_ids: Sequence[int]) -> list[tuple[int, int]] | None:
    """Per token its characters [start, end) in ``decode(token_ids).strip()`` (the engine's text), from the
    lengths of the decoded prefixes; None when a prefix does not decode to a prefix of the whole text (a token
    boundary inside a multi-byte character, a clean-up rule), so no confidence is made up."""
    ids = list(token_ids)
    full = decode(ids)
    lead = len(full) - len(full.lstrip())
    text_end = len(full.rstrip())
    spans: list[tuple[int, int]] = []
    previous = 0
    for count in range(1, len(ids) + 1):
        prefix = decode(ids[:count])
        if not full.startswith(prefix):
            return None
        end = len(prefix)
        spans.append((min(max(previous - lead, 0), text_end - lead), min(max(end - lead, 0), text_end - lead)))
        previous = end
    return spans


def waypoint_token_probabilities(
    number_spans: Sequence[tuple[tuple[int, int], tuple[int, int]]],
    token_spans: Sequence[tuple[int, int]],
    token_probabilities: Sequence[float],
) -> tuple[tuple[float, ...], ...]:
    """Per waypoint the probabilities of the tokens overlapping its x or y number (each token once)."""
    result = []
    for pair in number_spans:
        chosen = [
            probability
            for (start, end), probability in zip(token_spans, token_probabilities, strict=True)
            if any(start < number_end and number_start < end for number_start, number_end in pair)
        ]
        result.append(tuple(chosen))
    return tuple(result)


def generation_waypoint_probabilities(generation: Any, parsed: Any) -> tuple[tuple[float, ...], ...]:
    """Per waypoint of a valid parse (``core.parsing``) the winning probabilities of its numbers' tokens in
    ``generation`` (an engine's result); () when the generation has no per-token probabilities or its tokens
    cannot be mapped to characters."""
    probabilities = getattr(generation, "token_confidence", None)
    spans_of = getattr(generation, "token_spans", None)
    if not parsed.valid or not probabilities or not callable(spans_of):
        return ()
    spans = spans_of()
    if spans is None or len(spans) != len(probabilities):
        return ()
    return waypoint_token_probabilities(parsed.waypoint_spans(), spans, probabilities)


def waypoint_confidence(token_probabilities: Sequence[Sequence[float]], aggregate: str = WAYPOINT_AGGREGATE):
    """Per waypoint the aggregate (`AGGREGATES`) of its tokens' probabilities; 0 for a waypoint without one."""
    combine = AGGREGATES[aggregate]
    return tuple(float(combine(values)) if values else 0.0 for values in token_probabilities)


def plan_confidence(waypoint_confidences: Sequence[float]) -> float:
    """The plan's confidence: its least confident waypoint (0 when there is none)."""
    return float(min(waypoint_confidences)) if waypoint_confidences else 0.0


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties get their mean rank); None for fewer than 3 pairs or a constant side."""
    if len(a) < 3:
        return None
    ranks = [_ranks(np.asarray(values, float)) for values in (a, b)]
    if ranks[0].std() == 0 or ranks[1].std() == 0:
        return None
    return float(np.corrcoef(ranks[0], ranks[1])[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):  # ties: the mean of their ranks
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def separation_auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """The probability that a score of `positive` (e.g. a valid plan's confidence) exceeds one of `negative` (a
    rejected plan's), ties counting half: the area under the ROC curve. None when a side is empty."""
    if not len(positive) or not len(negative):
        return None
    ranks = _ranks(np.asarray([*positive, *negative], float))
    n_pos, n_neg = len(positive), len(negative)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos - 1) / 2) / (n_pos * n_neg))
