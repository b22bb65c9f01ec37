"""Per-waypoint confidence: tokens → characters → the parser's numbers → waypoints; and its analysis."""

from __future__ import annotations

import math

import pytest
from core_helpers import tiny_checkpoint

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_processor
from wam_diff2_ros.core.confidence import (
    plan_confidence,
    token_char_spans,
    waypoint_confidence,
    waypoint_token_probabilities,
)
from wam_diff2_ros.core.parsing import parse_waypoints
from wam_diff2_ros.replay.confidence_analysis import confidence_analysis, decoding_summary, spearman
from wam_diff2_ros.replay.evaluation import EgoTrack

pytestmark = pytest.mark.core

ANSWER = " (1.00,0.00),(2.00,0.10)"


def pieces_decoder(pieces: list[str]):
    """A decode function over a vocabulary whose token i is `pieces[i]`."""
    return lambda ids: "".join(pieces[i] for i in ids)


def test_parser_gives_each_number_its_characters():
    text = "  1.5, -0.25\n3.0,0.5<|im_end|>junk"
    parsed = parse_waypoints(text, num_waypoints=2, check_kinematics=False)
    assert parsed.valid
    assert [text[a:b] for a, b in parsed.spans] == ["1.5", "-0.25", "3.0", "0.5"]
    assert parsed.waypoint_spans() == ((parsed.spans[0], parsed.spans[1]), (parsed.spans[2], parsed.spans[3]))


def test_tokens_map_to_waypoints_through_the_parser():
    pieces = [" (", "1", ".00", ",", "0.00", "),(", "2", ".", "00", ",0", ".10", ")"]
    decode = pieces_decoder(pieces)
    ids = list(range(len(pieces)))
    text = decode(ids).strip()
    spans = token_char_spans(decode, ids)
    assert spans is not None and len(spans) == len(ids)
    assert [text[a:b] for a, b in spans] == ["(", *pieces[1:]]
    probabilities = [0.9, 0.8, 0.7, 0.99, 0.6, 0.95, 0.5, 0.99, 0.4, 0.3, 0.2, 0.9]
    parsed = parse_waypoints(text, num_waypoints=2, check_kinematics=False)
    per_waypoint = waypoint_token_probabilities(parsed.waypoint_spans(), spans, probabilities)
    # waypoint 1: "1", ".00", "0.00"; waypoint 2: "2", ".", "00", ",0" (writes the 0 of 0.10), ".10"
    assert per_waypoint == ((0.8, 0.7, 0.6), (0.5, 0.99, 0.4, 0.3, 0.2))
    assert waypoint_confidence(per_waypoint, "min") == (0.6, 0.2)
    geomean = waypoint_confidence(per_waypoint, "geomean")
    assert geomean[0] == pytest.approx(math.exp((math.log(0.8) + math.log(0.7) + math.log(0.6)) / 3))
    assert waypoint_confidence(per_waypoint) == geomean  # the published one
    assert waypoint_confidence(per_waypoint, "product")[0] == pytest.approx(0.8 * 0.7 * 0.6)
    assert plan_confidence((0.6, 0.2)) == 0.2 and plan_confidence(()) == 0.0


def test_unmappable_tokens_give_no_confidence():
    def decode(ids):  # a prefix that is no prefix of the whole text (a clean-up rule changing it)
        return "ab" if len(ids) == 1 else "xyz"

    assert token_char_spans(decode, [0, 1]) is None


def test_the_real_tokenizer_maps_a_planning_answer():
    processor = load_processor(inspect_checkpoint(tiny_checkpoint(seed=1)))
    answer = "4.11,0.00,8.21,-0.02,13.10,0.00"
    ids = processor.tokenizer(answer)["input_ids"]
    spans = token_char_spans(processor.decode_raw, ids)
    text = processor.decode(ids)
    assert spans is not None and "".join(text[a:b] for a, b in spans) == text


def record(stamp_s: float, x_step: float, probabilities: list[float], valid: bool = True) -> dict:
    waypoints = [[x_step * (k + 1), 0.0] for k in range(8)]
    return {
        "status": "planned",
        "stamp_ns": int(stamp_s * 1e9),
        "valid": valid,
        "waypoints": waypoints if valid else None,
        "waypoint_token_probabilities": [[p, 0.99] for p in probabilities] if valid else [],
        "answer_confidence": min(probabilities),
        "confidence": min(probabilities),
        "waypoint_confidence": probabilities,
        "steps_per_block": [3, 2],
        "deadline_ms": 50.0,
        "deadline_met": stamp_s < 2,
        "early_tokens": 4,
        "timing": {"total_ms": 40.0},
    }


def test_confidence_analysis_finds_a_confidence_that_tracks_the_error():
    """The ego drives 2 m per 0.5 s; plans whose waypoints are less sure are further off, more so further out."""
    track = EgoTrack.from_odometry([(int(t * 1e8), 0.4 * t, 0.0, 0.0) for t in range(0, 200)])
    records = [
        record(1.0, 2.0, [0.9] * 8),  # exact
        record(2.0, 2.5, [0.5 - 0.02 * k for k in range(8)]),  # off by 0.5 m per waypoint, growing
        record(3.0, 3.0, [0.3 - 0.02 * k for k in range(8)]),  # off by 1 m per waypoint
        record(4.0, 2.0, [0.1] * 8, valid=False),
    ]
    analysis = confidence_analysis(records, track)
    by_min = analysis["waypoint"]["min"]
    assert by_min["waypoints"] == 24
    assert by_min["spearman"] < -0.8 and by_min["spearman_within_horizon"] == pytest.approx(-1.0)
    deciles = by_min["reliability"]
    assert deciles[0]["mean_error_m"] > deciles[-1]["mean_error_m"]
    assert analysis["plan_spearman_confidence_vs_ade_4s"] == pytest.approx(-1.0)
    for aggregate in ("min", "geomean", "product"):
        assert analysis["waypoint"][aggregate]["plan_spearman_vs_ade_4s"] == pytest.approx(-1.0)
    lowest = analysis["thresholds"][0]
    assert lowest["below"]["valid_rate"] == 0.0 and lowest["above"]["valid_rate"] == 1.0
    summary = decoding_summary(records)
    assert summary["deadline_met_rate"] == 0.25 and summary["mean_steps_per_block"] == 2.5
    assert summary["mean_early_tokens"] == 4 and summary["deadline_ms"] == [50.0]


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 3, 1]) < -0.9
    assert spearman([1, 1, 1], [1, 2, 3]) is None and spearman([1, 2], [2, 1]) is None


def test_separation_auc_counts_pairs_and_ties():
    from wam_diff2_ros.core.confidence import separation_auc

    assert separation_auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert separation_auc([0.1, 0.2], [0.9, 0.8]) == 0.0
    assert separation_auc([0.5, 0.9], [0.5, 0.1]) == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    assert separation_auc([0.5], []) is None and separation_auc([], [0.5]) is None


def test_rejected_plans_that_read_as_waypoints_are_set_against_the_valid_ones():
    """Rejected plans keep their token probabilities: the AUC says whether confidence tells them apart."""
    track = EgoTrack.from_odometry([(int(t * 1e8), 0.4 * t, 0.0, 0.0) for t in range(0, 200)])
    rejected = [record(4.0, 2.0, [0.2] * 8), record(5.0, 2.0, [0.95] * 8)]
    for r in rejected:
        r["valid"], r["rejected_waypoints"], r["waypoints"] = False, r["waypoints"], None
    format_error = record(6.0, 2.0, [0.05] * 8, valid=False)  # no waypoints: only the answer AUC sees it
    records = [record(1.0, 2.0, [0.9] * 8), record(2.0, 2.5, [0.5] * 8), *rejected, format_error]
    analysis = confidence_analysis(records, track)
    # valid plans 0.9 and 0.5 against rejected 0.2 and 0.95: 2 of 4 pairs ordered
    assert analysis["plan_auc_valid_vs_rejected"] == pytest.approx(0.5)
    assert analysis["valid_plans_scored"] == 2 and analysis["rejected_plans_scored"] == 2
    assert analysis["waypoint"]["min"]["plan_auc_valid_vs_rejected"] == pytest.approx(0.5)
    # answers: valid 0.9, 0.5 against 0.2, 0.95, 0.05: 4 of 6 pairs ordered
    assert analysis["answer_auc_valid_vs_rejected"] == pytest.approx(4 / 6)
