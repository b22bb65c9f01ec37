"""Tests for wam_diff2_ros.core.parsing: unit cases and hypothesis properties."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wam_diff2_ros.core.parsing import (
    Detection,
    DetectionParse,
    PlanParse,
    Waypoint,
    clean_answer,
    parse_detections,
    parse_waypoints,
)

pytestmark = pytest.mark.core

# The trained answer from the reference README.
TRAINED_ANSWER = "2.26,-0.17,4.43,-0.70,6.52,-1.55,8.48,-2.64,10.28,-3.88,11.99,-5.25,13.76,-6.83,15.59,-8.59"
TRAINED_POINTS = [
    (2.26, -0.17),
    (4.43, -0.70),
    (6.52, -1.55),
    (8.48, -2.64),
    (10.28, -3.88),
    (11.99, -5.25),
    (13.76, -6.83),
    (15.59, -8.59),
]

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _assert_consistent(result: PlanParse, num_waypoints: int = 8, dt: float = 0.5) -> None:
    assert isinstance(result, PlanParse)
    assert all(isinstance(n, float) for n in result.numbers)
    if result.valid:
        assert result.reason == ""
        assert len(result.waypoints) == num_waypoints
        assert len(result.numbers) == 2 * num_waypoints
        for i, waypoint in enumerate(result.waypoints):
            assert waypoint.x == result.numbers[2 * i]
            assert waypoint.y == result.numbers[2 * i + 1]
            assert waypoint.t == pytest.approx(dt * (i + 1))
            assert math.isfinite(waypoint.yaw)
            assert -math.pi <= waypoint.yaw <= math.pi
    else:
        assert result.reason
        assert result.waypoints == ()


# ------------------------------------------------------------------------------------------ waypoints


def test_trained_answer_parses_into_eight_waypoints():
    result = parse_waypoints(TRAINED_ANSWER)
    _assert_consistent(result)
    assert result.valid
    assert [(w.x, w.y) for w in result.waypoints] == TRAINED_POINTS
    assert [w.t for w in result.waypoints] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    # Yaw: direction of travel from the previous point (origin first), computed independently here.
    previous = (0.0, 0.0)
    for waypoint, (x, y) in zip(result.waypoints, TRAINED_POINTS, strict=True):
        assert waypoint.yaw == pytest.approx(math.atan2(y - previous[1], x - previous[0]))
        previous = (x, y)
    assert result.waypoints[0].yaw == pytest.approx(-0.0751, abs=1e-4)  # slight right turn


def test_yaw_is_kept_when_standing_still():
    stopped = parse_waypoints(",".join(["0.00"] * 16))
    assert stopped.valid
    assert [w.yaw for w in stopped.waypoints] == [0.0] * 8
    # Move diagonally to (1, 1), then stop (steps below 1 mm): the yaw of the stop points stays 45°.
    # (A sideways first step breaks the kinematic rules; this test is about yaw, so they are off.)
    values = [1.0, 1.0] + [1.0, 1.0005] * 7
    result = parse_waypoints(",".join(str(v) for v in values), check_kinematics=False)
    assert result.valid
    assert all(w.yaw == pytest.approx(math.pi / 4) for w in result.waypoints)
    # A backwards step gives a yaw near ±π.
    back = parse_waypoints("-1,0," + ",".join(["-1", "0"] * 7), check_kinematics=False)
    assert back.waypoints[0].yaw == pytest.approx(math.pi)


@pytest.mark.parametrize(
    "text",
    [
        TRAINED_ANSWER,
        TRAINED_ANSWER.replace(",", ", "),
        TRAINED_ANSWER.replace(",", ";"),
        TRAINED_ANSWER.replace(",", " "),
        TRAINED_ANSWER.replace(",", "\n"),
        "  " + TRAINED_ANSWER + " \n",
        TRAINED_ANSWER + "<|im_end|>",
        TRAINED_ANSWER + "<|endoftext|>anything after the end token",
        ", ".join(f"({x:.2f}, {y:.2f})" for x, y in TRAINED_POINTS),
        "\n".join(f"[{x:.2f},{y:.2f}]" for x, y in TRAINED_POINTS),
        "[" + ", ".join(f"({x:.2f}, {y:.2f})" for x, y in TRAINED_POINTS) + "]",
        "[" + TRAINED_ANSWER + "]",
        "; ".join(f"{x:.2f} {y:.2f}" for x, y in TRAINED_POINTS),
        TRAINED_ANSWER.replace("2.26", "+2.26").replace("15.59", "1.559e1"),
    ],
)
def test_accepted_answer_formats(text):
    result = parse_waypoints(text)
    assert result.valid, result.reason
    flat = [v for w in result.waypoints for v in (w.x, w.y)]
    assert flat == pytest.approx([v for point in TRAINED_POINTS for v in point])


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty answer"),
        ("  \n", "empty answer"),
        ("<|im_end|>" + TRAINED_ANSWER, "empty answer"),
        (TRAINED_ANSWER.rsplit(",", 1)[0], "expected 16 numbers, got 15"),
        (TRAINED_ANSWER + ",1.0", "expected 16 numbers, got 17"),
        (TRAINED_ANSWER + ",1.0,2.0", "expected 16 numbers, got 18"),
        ("1,2", "expected 16 numbers, got 2"),
        ("The waypoints are " + TRAINED_ANSWER, "'The waypoints are"),
        (TRAINED_ANSWER + " done", "done"),
        (TRAINED_ANSWER.replace("4.43,", "4.43,,x"), "x"),
        (TRAINED_ANSWER.replace("4.43,-0.70", "4.43-0.70"), "after number '4.43'"),
        (TRAINED_ANSWER.replace("4.43", "4.4.3"), "after number '4.4'"),
        (TRAINED_ANSWER.replace("4.43", "nan"), "number 3 is not finite"),
        (TRAINED_ANSWER.replace("-0.70", "inf"), "number 4 is not finite"),
        (TRAINED_ANSWER.replace("-0.70", "1e999"), "number 4 is not finite"),
        (TRAINED_ANSWER.replace("15.59", "150.59"), "waypoint 8 x=150.59"),
        (TRAINED_ANSWER.replace("-8.59", "-108.59"), "waypoint 8 y=-108.59"),
        (TRAINED_ANSWER.replace("2.26", "30.00", 1), "step from the origin to waypoint 1 is 30.00 m"),
        (TRAINED_ANSWER.replace("10.28", "40.28"), "step from waypoint 4 to waypoint 5"),
        ("(" + TRAINED_ANSWER, "unclosed '('"),
        (TRAINED_ANSWER + ")", "unmatched ')'"),
        ("(" + TRAINED_ANSWER + "]", "unmatched ']'"),
        ("[[[" + TRAINED_ANSWER + "]]]", "nested too deeply"),
        ("2.26,(-0.17,4.43)," + TRAINED_ANSWER.split(",", 3)[3], "not an (x, y) pair"),
        ("(2.26,-0.17,4.43)," + TRAINED_ANSWER.split(",", 3)[3], "found 3 number(s)"),
        ("()," + TRAINED_ANSWER, "found 0 number(s)"),
        ("[(2.26,-0.17)," + TRAINED_ANSWER.split(",", 2)[2] + "]", "brackets must wrap"),
        ("information", "unexpected text"),
        ("2.26,-0.17 {", "unexpected text"),
    ],
)
def test_rejected_answers_have_specific_reasons(text, fragment):
    result = parse_waypoints(text)
    _assert_consistent(result)
    assert not result.valid
    assert fragment in result.reason, result.reason


def test_numbers_record_what_was_read_even_when_invalid():
    result = parse_waypoints("1.5,2.5,3.5 oops 4.5")
    assert not result.valid
    assert result.numbers == (1.5, 2.5, 3.5)
    result = parse_waypoints(TRAINED_ANSWER.replace("15.59", "150.59"))
    assert len(result.numbers) == 16 and result.numbers[14] == 150.59


def test_limits_and_timing_are_configurable():
    result = parse_waypoints("1,0,2,0,3,0", num_waypoints=3, dt=0.1)
    assert result.valid
    assert [w.t for w in result.waypoints] == pytest.approx([0.1, 0.2, 0.3])
    assert not parse_waypoints("1,0,2,0,3,0", num_waypoints=3, max_abs_coord_m=2.5).valid
    assert not parse_waypoints("1,0,2,0,3,0", num_waypoints=3, max_step_m=0.5).valid
    assert parse_waypoints("1,0,2,0,3,0", num_waypoints=3, max_step_m=1.0).valid  # == limit is fine


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_waypoints": 0},
        {"num_waypoints": 2.0},
        {"dt": 0.0},
        {"dt": float("nan")},
        {"max_abs_coord_m": -1.0},
        {"max_step_m": float("inf")},
    ],
)
def test_bad_parser_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        parse_waypoints(TRAINED_ANSWER, **kwargs)


# Text made of the characters that matter to the parser, plus arbitrary unicode.
_ANSWER_ALPHABET = st.sampled_from([*"0123456789.,;-+ \n\t()[]eE", "nan", "inf", "<|im_end|>", "x"])
_answer_like_text = st.lists(_ANSWER_ALPHABET, max_size=80).map("".join)


@st.composite
def _edited_trained_answer(draw):
    """The trained answer with one slice replaced by answer-like text (often still valid)."""
    start = draw(st.integers(0, len(TRAINED_ANSWER)))
    end = draw(st.integers(start, min(len(TRAINED_ANSWER), start + 6)))
    insert = draw(st.lists(_ANSWER_ALPHABET, max_size=3).map("".join))
    return TRAINED_ANSWER[:start] + insert + TRAINED_ANSWER[end:]


@PROPERTY_SETTINGS
@given(st.one_of(st.text(max_size=200), _answer_like_text, _edited_trained_answer()))
def test_any_text_never_raises_and_is_consistent(text):
    result = parse_waypoints(text)
    _assert_consistent(result)


_step = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False)


@st.composite
def _plausible_plans(draw):
    """8 waypoints reached by steps of at most ~14 m, so every coordinate stays within 80 m."""
    points = []
    x = y = 0.0
    for _ in range(8):
        x += draw(_step)
        y += draw(_step)
        points.append((x, y))
    return points


_SEPARATOR_STYLES = st.sampled_from(["flat", "flat_space", "pairs", "brackets", "newlines", "semicolons"])


def _format_plan(points, style: str) -> str:
    pairs = [(f"{x:.2f}", f"{y:.2f}") for x, y in points]
    if style == "flat":
        return ",".join(v for pair in pairs for v in pair)
    if style == "flat_space":
        return ", ".join(v for pair in pairs for v in pair)
    if style == "pairs":
        return ", ".join(f"({x}, {y})" for x, y in pairs)
    if style == "brackets":
        return "[" + ", ".join(f"[{x}, {y}]" for x, y in pairs) + "]"
    if style == "newlines":
        return "\n".join(f"{x},{y}" for x, y in pairs)
    return "; ".join(f"{x} {y}" for x, y in pairs)


@PROPERTY_SETTINGS
@given(_plausible_plans(), _SEPARATOR_STYLES)
def test_formatted_plans_round_trip(points, style):
    # Random walks are rarely drivable: this property is about the format, the kinematic rules are off.
    result = parse_waypoints(_format_plan(points, style), check_kinematics=False)
    _assert_consistent(result)
    assert result.valid, result.reason
    assert [w.t for w in result.waypoints] == pytest.approx([0.5 * (i + 1) for i in range(8)])
    for waypoint, (x, y) in zip(result.waypoints, points, strict=True):
        assert abs(waypoint.x - x) <= 0.005 + 1e-9
        assert abs(waypoint.y - y) <= 0.005 + 1e-9


@PROPERTY_SETTINGS
@given(
    st.lists(st.floats(min_value=-50, max_value=50, allow_nan=False), max_size=40).filter(
        lambda values: len(values) != 16
    ),
    st.sampled_from([",", ", ", ";", " ", "\n"]),
)
def test_any_count_other_than_sixteen_is_invalid_and_never_padded(values, separator):
    result = parse_waypoints(separator.join(f"{v:.2f}" for v in values))
    _assert_consistent(result)
    assert not result.valid
    assert result.waypoints == ()
    assert len(result.numbers) == len(values)
    if values:
        assert result.reason == f"expected 16 numbers, got {len(values)}"
    else:
        assert result.reason == "empty answer"


# ----------------------------------------------------------------------------------------- detections


def test_detections_in_json_fence_are_scaled_to_pixels():
    answer = (
        "```json\n"
        "[\n"
        '  {"bbox_2d": [100, 200, 300, 400], "label": "car"},\n'
        '  {"bbox_2d": [500, 0, 1000, 1000], "label": "traffic light", "score": 0.75}\n'
        "]\n"
        "```"
    )
    result = parse_detections(answer, image_width=1920, image_height=1080)
    assert result == DetectionParse(
        detections=(
            Detection("car", 192.0, 216.0, 576.0, 432.0, None),
            Detection("traffic light", 960.0, 0.0, 1920.0, 1080.0, 0.75),
        ),
        skipped=0,
        repaired=False,
        reason="",
    )


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: s,
        lambda s: f"```json\n{s}\n```",
        lambda s: f"```JSON\n{s}\n```",
        lambda s: f"```\n{s}\n```",
        lambda s: f"Here are the objects:\n```json\n{s}\n```\nLet me know if you need more.",
        lambda s: f"```json\n{s}",  # closing fence missing
        lambda s: f"{s}<|im_end|>",
        lambda s: f"  {s}  trailing words",
    ],
)
def test_fences_and_surrounding_text(wrap):
    body = '[{"bbox_2d": [0, 0, 500, 500], "label": "bus", "confidence": 0.5}]'
    result = parse_detections(wrap(body), image_width=200, image_height=100)
    assert result.detections == (Detection("bus", 0.0, 0.0, 100.0, 50.0, 0.5),)
    assert result.skipped == 0 and not result.repaired and result.reason == ""


def test_single_object_and_object_sequence():
    one = parse_detections('{"bbox_2d": [10, 10, 20, 30], "label": "cone"}', 1000, 1000)
    assert one.detections == (Detection("cone", 10.0, 10.0, 20.0, 30.0, None),)
    two = parse_detections(
        '{"bbox_2d": [10, 10, 20, 30], "label": "cone"},\n{"bbox_2d": [1, 2, 3, 4], "label": "dog"}',
        1000,
        1000,
    )
    assert [d.label for d in two.detections] == ["cone", "dog"]
    assert not two.repaired


def test_truncated_answer_is_repaired():
    answer = (
        '```json\n[{"bbox_2d": [100, 100, 200, 200], "label": "car"}, '
        '{"bbox_2d": [300, 300, 400, 400], "label": "pedestrian"}, {"bbox_2d": [5, 5, 6'
    )
    result = parse_detections(answer, 1000, 1000)
    assert [d.label for d in result.detections] == ["car", "pedestrian"]
    assert result.repaired
    assert result.skipped == 0
    assert "truncated" in result.reason


def test_truncated_inside_a_string_with_brackets():
    answer = '[{"bbox_2d": [1, 1, 9, 9], "label": "sign \\"{[x]}\\""}, {"bbox_2d": [2, 2, 8, 8], "label": "a}]'
    result = parse_detections(answer, 1000, 1000)
    assert [d.label for d in result.detections] == ['sign "{[x]}"']
    assert result.repaired


def test_bad_entries_are_skipped_and_counted():
    entries = [
        {"bbox_2d": [10, 10, 20, 20], "label": "good"},
        {"bbox_2d": [10, 10, 20], "label": "three values"},
        {"bbox_2d": [10, 10, 20, 20, 30], "label": "five values"},
        {"label": "no box"},
        {"bbox_2d": [10, "a", 20, 20], "label": "text value"},
        {"bbox_2d": [10, True, 20, 20], "label": "bool value"},
        {"bbox_2d": [10, 10, 10, 20], "label": "zero width"},
        {"bbox_2d": [-50, 10, -10, 20], "label": "left of the image"},
        {"bbox_2d": [10, 10, 20, 20]},
        {"bbox_2d": [10, 10, 20, 20], "label": "  "},
        {"bbox_2d": [10, 10, 20, 20], "label": 7},
        {"bbox_2d": [10, 10, 20, 20], "label": "bad score", "score": "high"},
        "just a string",
        [1, 2, 3, 4],
        {"bbox_2d": [30, 40, 10, 20], "label": "swapped"},
    ]
    result = parse_detections(json.dumps(entries), 1000, 1000)
    assert [d.label for d in result.detections] == ["good", "swapped"]
    assert result.detections[1] == Detection("swapped", 10.0, 20.0, 30.0, 40.0, None)
    assert result.skipped == len(entries) - 2
    assert not result.repaired
    assert f"skipped {len(entries) - 2} of {len(entries)} entries" in result.reason
    assert "entry 2: bbox_2d must be a list of 4 numbers" in result.reason


def test_non_finite_and_huge_values_are_skipped():
    text = (
        '[{"bbox_2d": [NaN, 1, 2, 3], "label": "a"}, {"bbox_2d": [1, 1, Infinity, 3], "label": "b"}, '
        '{"bbox_2d": [1, 1, 1' + "0" * 400 + ', 3], "label": "c"}, {"bbox_2d": [1, 1, 2, 3], "label": "d"}]'
    )
    result = parse_detections(text, 1000, 1000)
    assert [d.label for d in result.detections] == ["d"]
    assert result.skipped == 3


def test_coordinates_are_clamped_into_the_image():
    result = parse_detections('[{"bbox_2d": [-20, -5, 1010, 1200], "label": "truck"}]', 640, 480)
    assert result.detections == (Detection("truck", 0.0, 0.0, 640.0, 480.0, None),)
    scaled = parse_detections('[{"bbox_2d": [0.1, 0.2, 0.5, 1.5], "label": "x"}]', 100, 50, 1.0)
    assert scaled.detections == (Detection("x", 10.0, 10.0, 50.0, 50.0, None),)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no boxes here",
        "[",
        "{",
        "```json\n",
        "```json\n[{",
        "[1, 2",
        '{"bbox_2d": [1, 2',
        "]]]",
        "[[[[" * 3000,
    ],
)
def test_unparseable_text_gives_no_detections_and_a_reason(text):
    result = parse_detections(text, 100, 100)
    assert result.detections == ()
    assert result.reason


def test_empty_list_is_a_clean_empty_answer():
    assert parse_detections("```json\n[]\n```", 10, 10) == DetectionParse((), 0, False, "")


@pytest.mark.parametrize(("width", "height"), [(0, 10), (10, 0), (-1, 10), (10.5, 10), (True, 10)])
def test_image_size_must_be_positive(width, height):
    with pytest.raises(ValueError, match="image_"):
        parse_detections("[]", width, height)


def test_coordinate_scale_must_be_positive():
    with pytest.raises(ValueError, match="coordinate_scale"):
        parse_detections("[]", 10, 10, coordinate_scale=0)


_labels = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda s: s.strip() != ""
)


@st.composite
def _valid_boxes(draw):
    x1 = draw(st.integers(0, 999))
    x2 = draw(st.integers(x1 + 1, 1000))
    y1 = draw(st.integers(0, 999))
    y2 = draw(st.integers(y1 + 1, 1000))
    entry = {"bbox_2d": [x1, y1, x2, y2], "label": draw(_labels)}
    score = draw(st.one_of(st.none(), st.floats(0.0, 1.0)))
    if score is not None:
        entry[draw(st.sampled_from(["score", "confidence"]))] = score
    return entry


@st.composite
def _detection_answers(draw):
    entries = draw(st.lists(_valid_boxes(), min_size=1, max_size=6))
    body = json.dumps(entries, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    fence = draw(st.sampled_from(["none", "json", "plain"]))
    if fence == "json":
        body = f"```json\n{body}\n```"
    elif fence == "plain":
        body = f"```\n{body}\n```"
    return entries, body


@PROPERTY_SETTINGS
@given(_detection_answers(), st.integers(1, 4096), st.integers(1, 4096))
def test_valid_detection_lists_round_trip(answer, width, height):
    entries, text = answer
    result = parse_detections(text, width, height)
    assert result.skipped == 0 and not result.repaired and result.reason == ""
    assert len(result.detections) == len(entries)
    for detection, entry in zip(result.detections, entries, strict=True):
        x1, y1, x2, y2 = entry["bbox_2d"]
        assert detection.label == entry["label"].strip()
        assert detection.x_min == pytest.approx(x1 * width / 1000)
        assert detection.y_min == pytest.approx(y1 * height / 1000)
        assert detection.x_max == pytest.approx(x2 * width / 1000)
        assert detection.y_max == pytest.approx(y2 * height / 1000)
        assert 0.0 <= detection.x_min < detection.x_max <= width
        assert 0.0 <= detection.y_min < detection.y_max <= height
        assert detection.score == entry.get("score", entry.get("confidence"))


@PROPERTY_SETTINGS
@given(_detection_answers(), st.data())
def test_truncated_answers_never_raise_and_keep_a_prefix_of_the_detections(answer, data):
    _entries, text = answer
    full = parse_detections(text, 1280, 720)
    cuts = data.draw(st.lists(st.integers(0, len(text)), min_size=1, max_size=20))
    for cut in cuts:
        result = parse_detections(text[:cut], 1280, 720)
        assert isinstance(result, DetectionParse)
        count = len(result.detections)
        assert result.detections == full.detections[:count]
        assert result.skipped == 0
        if count < len(full.detections) and count > 0:
            assert result.repaired


def test_every_prefix_of_a_fenced_answer():
    text = (
        '```json\n[{"bbox_2d": [12, 34, 560, 780], "label": "car", "score": 0.9},'
        ' {"bbox_2d": [100, 100, 200, 300], "label": "traffic light"}]\n```'
    )
    full = parse_detections(text, 1920, 1080)
    assert len(full.detections) == 2
    seen = set()
    for cut in range(len(text) + 1):
        result = parse_detections(text[:cut], 1920, 1080)
        assert result.detections == full.detections[: len(result.detections)]
        seen.add(len(result.detections))
    assert seen == {0, 1, 2}


@PROPERTY_SETTINGS
@given(st.text(max_size=300), st.integers(1, 5000), st.integers(1, 5000))
def test_any_text_never_raises_for_detections(text, width, height):
    result = parse_detections(text, width, height)
    assert isinstance(result, DetectionParse)
    assert result.skipped >= 0
    for detection in result.detections:
        assert 0.0 <= detection.x_min < detection.x_max <= width
        assert 0.0 <= detection.y_min < detection.y_max <= height


_json_ish = st.lists(
    st.sampled_from(['{"bbox_2d": [', "1", "500", ", ", "]", "}", '"label": "a"', '"', "[", "{", "```json\n"]),
    max_size=40,
).map("".join)


@PROPERTY_SETTINGS
@given(_json_ish)
def test_json_like_garbage_never_raises(text):
    result = parse_detections(text, 100, 100)
    assert isinstance(result, DetectionParse)
    assert result.skipped >= 0
    if not result.detections and not result.skipped:
        assert result.reason or text.count("[") >= 1  # nothing found is explained, or an empty list
    for detection in result.detections:
        assert detection.label == "a"
        assert 0.0 <= detection.x_min < detection.x_max <= 100


# --------------------------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  The light is red.  ", "The light is red."),
        ("The light is red.<|im_end|>", "The light is red."),
        ("The light is red.<|im_end|>\n<|endoftext|>", "The light is red."),
        ("Yes.<|endoftext|> garbage after the end", "Yes."),
        ("<|im_start|>Two cars.<|vision_end|>", "Two cars."),
        ("<|im_end|>", ""),
        ("plain", "plain"),
        ("a <| not a token |> b", "a <| not a token |> b"),
    ],
)
def test_clean_answer(text, expected):
    assert clean_answer(text) == expected


def test_dataclasses_are_frozen():
    waypoint = Waypoint(t=0.5, x=1.0, y=0.0, yaw=0.0)
    with pytest.raises(AttributeError):
        waypoint.x = 2.0  # type: ignore[misc]
    detection = Detection("car", 0, 0, 1, 1, None)
    with pytest.raises(AttributeError):
        detection.label = "bus"  # type: ignore[misc]


def test_a_fence_inside_a_label_is_not_an_opening_fence():
    """Found by hypothesis: a label "```" made the whole answer parse differently from its truncations."""
    text = '[{"bbox_2d": [10, 20, 300, 400], "label": "car"}, {"bbox_2d": [1, 2, 3, 4], "label": "```"}]'
    full = parse_detections(text, 1000, 1000)
    assert [d.label for d in full.detections] == ["car", "```"]
    for cut in range(len(text) + 1):
        prefix = parse_detections(text[:cut], 1000, 1000)
        assert prefix.detections == full.detections[: len(prefix.detections)]
