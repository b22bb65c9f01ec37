"""Candidate plans: several answers to one planning prompt, each parsed, gated and scored; the best is published.

With ``planning.candidates`` N > 1 the planning prompt is decoded as one batch of N rows sharing one prefill
(``Engine.generate_candidates``): row 0 greedy (temperature 0: exactly the single-prompt greedy answer), rows
1..N-1 sampled at ``planning.candidate_temperature`` with the decoding settings' top-k / top-p, from one
generator seeded from the image stamp (:func:`candidate_seed`), so a replay of the same bag reproduces every
candidate. Each row goes through the same parser and kinematic gate as a single plan; its score is its plan
confidence (the least confident waypoint, core/confidence.py). The published plan is the valid candidate with
the highest score, the lowest row on a tie (greedy first); none valid: no plan, as with one candidate.

The score is the confidence alone: the gate already removes implausible plans, and the decoder's confidence is
the only per-candidate signal the model gives. A sampled row's token probabilities come from its tempered
distribution (what the remasking rule compares); at ``candidate_temperature`` 1 without top-k / top-p they are
the model's own probabilities, on the greedy row's scale, which is why 1 is the default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .parsing import Waypoint

MAX_CANDIDATES = 16  # planning.candidates at most this (a batch of 16 rows)
DEFAULT_CANDIDATES = 1  # one greedy plan: decoding as without candidates
DEFAULT_CANDIDATE_TEMPERATURE = 1.0  # sampled rows; 1: the model's own probabilities, comparable scores
SEED_MODULUS = 2**63  # seeds stay within torch's manual_seed range


def check_candidates(count: int, temperature: float) -> None:
    """Raise ``ValueError`` with the reason when ``count`` candidates at ``temperature`` cannot be decoded."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_CANDIDATES:
        raise ValueError(f"planning.candidates must be an integer in [1, {MAX_CANDIDATES}], got {count!r}")
    if not math.isfinite(temperature) or (count > 1 and temperature <= 0):
        raise ValueError(
            f"planning.candidate_temperature must be > 0 with planning.candidates > 1 "
            f"(rows 1.. are sampled), got {temperature:g}"
        )


def row_temperatures(count: int, temperature: float) -> tuple[float, ...]:
    """Per batch row its sampling temperature: row 0 greedy (0), the others ``temperature``."""
    return (0.0,) + (float(temperature),) * (count - 1)


def candidate_seed(stamp_ns: int, base_seed: int | None = None) -> int:
    """The sampling seed of a candidate batch: the image stamp (mixed with ``decoding.seed`` when set), so the
    same frame gives the same candidates in the node and in a replay."""
    mixed = int(stamp_ns) + (0 if base_seed is None else int(base_seed) * 1_000_000_007)
    return mixed % SEED_MODULUS


@dataclass(frozen=True)
class Candidate:
    """One decoded answer of a candidate batch, parsed and gated. ``score``: its plan confidence (0 when invalid
    or unknown); ``waypoints`` are kept for rejected answers that parsed (empty when the text did not)."""

    index: int  # batch row: 0 greedy, others sampled
    temperature: float
    valid: bool
    reason: str  # why the gate or the parser rejected it; "" when valid
    score: float
    waypoints: tuple[Waypoint, ...]
    waypoint_confidence: tuple[float, ...]
    raw_text: str

    def as_record(self) -> dict[str, Any]:
        """The candidate as plain JSON-able data (``predictions.jsonl``, the report page)."""
        return {
            "index": self.index,
            "temperature": self.temperature,
            "valid": self.valid,
            "reason": self.reason,
            "score": self.score,
            "waypoints": [[float(w.x), float(w.y)] for w in self.waypoints],
            "waypoint_confidence": [float(c) for c in self.waypoint_confidence],
            "raw_text": self.raw_text,
        }


def answer_waypoints(numbers: Sequence[float], num_waypoints: int, dt: float) -> tuple[Waypoint, ...]:
    """The waypoints a rejected answer wrote (to draw it), when it wrote ``2 * num_waypoints`` finite numbers;
    yaw toward each point from the previous one. Empty otherwise."""
    if len(numbers) != 2 * num_waypoints or not all(math.isfinite(v) for v in numbers):
        return ()
    points, previous = [], (0.0, 0.0)
    for index in range(num_waypoints):
        x, y = float(numbers[2 * index]), float(numbers[2 * index + 1])
        points.append(Waypoint(t=dt * (index + 1), x=x, y=y, yaw=math.atan2(y - previous[1], x - previous[0])))
        previous = (x, y)
    return tuple(points)


def choose(candidates: Sequence[Candidate]) -> int | None:
    """The index (position in ``candidates``) of the valid candidate with the highest score, the lowest index on a
    tie; None when none is valid."""
    best: int | None = None
    for position, candidate in enumerate(candidates):
        if candidate.valid and (best is None or candidate.score > candidates[best].score):
            best = position
    return best


def sequential_candidates(
    engine: Any,
    prompt: str,
    images: Sequence[Any],
    temperatures: Sequence[float],
    decode: Any,
    system: str | None = None,
    started_ns: int | None = None,
) -> list[Any]:
    """The candidates one decode after another (row ``i`` seeded ``decode.seed + i``): for engines without
    ``generate_candidates`` (test doubles) and as the benchmark's baseline for the batch."""
    seed = decode.seed or 0
    generations = []
    for row, temperature in enumerate(temperatures):
        row_decode = decode.with_overrides(temperature=temperature, seed=(seed + row) % SEED_MODULUS)
        kwargs = {} if started_ns is None else {"started_ns": started_ns}
        generations.append(engine.generate(prompt, list(images), decode=row_decode, system=system, **kwargs))
    return generations


def generate_candidates(
    engine: Any,
    prompt: str,
    images: Sequence[Any],
    temperatures: Sequence[float],
    decode: Any,
    system: str | None = None,
    started_ns: int | None = None,
) -> list[Any]:
    """One generation per row of ``temperatures``: the engine's batch (``generate_candidates``) where it has one,
    else :func:`sequential_candidates`."""
    batch = getattr(engine, "generate_candidates", None)
    if callable(batch):
        return list(batch(prompt, list(images), temperatures, decode=decode, system=system, started_ns=started_ns))
    return sequential_candidates(engine, prompt, images, temperatures, decode, system, started_ns)
