"""Tests for wam_diff2_ros.core.prompts (pure Python, no ROS, no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from wam_diff2_ros.core.prompts import (
    PLANNING_TEMPLATES,
    NavigationCommand,
    build_detection_prompt,
    build_messages,
    build_planning_prompt,
    build_vqa_prompt,
    format_number,
    parse_navigation_command,
    resolve_planning_template,
    split_prompt_with_images,
)

pytestmark = pytest.mark.core

# The human turn of the trained sample in the reference README (design notes §4), written out by hand.
TRAINED_NAVSIM_PROMPT = (
    "Here is a front-view images from a driving vehicle: <image>\n"
    "The navigation information is: right\n"
    "The current position is (0.00,0.00)\n"
    "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)\n"
    "Instruction: Based on the visual motion cues from the image (such as the relative speed of other "
    "vehicles and the changing distance to the intersection) and the provided telemetry, predict the "
    "optimal driving action for the next 4 seconds with 8 new waypoints."
)
MODEL_CARD_PROMPT = (
    "Here is a front-view image from a driving vehicle: <image>\n"
    "The navigation information is: right\n"
    "The current position is (0.00,0.00)\n"
    "The current velocity is: (4.66,-0.09) and current acceleration is: (0.17,-1.53)\n"
    "Instruction: Predict the optimal driving action for the next 4 seconds with 8 new waypoints."
)
SAMPLE_VELOCITY = (4.66, -0.09)
SAMPLE_ACCELERATION = (0.17, -1.53)


# ---------------------------------------------------------------------------------------------- planning


def test_navsim_template_reproduces_trained_sample_exactly():
    prompt = build_planning_prompt("right", SAMPLE_VELOCITY, SAMPLE_ACCELERATION)
    assert prompt == TRAINED_NAVSIM_PROMPT
    assert build_planning_prompt("right", SAMPLE_VELOCITY, SAMPLE_ACCELERATION, template="navsim") == prompt


def test_model_card_template_exact_text():
    prompt = build_planning_prompt("right", SAMPLE_VELOCITY, SAMPLE_ACCELERATION, template="model_card")
    assert prompt == MODEL_CARD_PROMPT


def test_builtin_templates_are_the_two_named_ones():
    assert set(PLANNING_TEMPLATES) == {"navsim", "model_card"}
    for name, text in PLANNING_TEMPLATES.items():
        assert resolve_planning_template(name) == text
        assert resolve_planning_template(f"  {name}\n") == text


def test_unrounded_telemetry_is_rounded_like_training_data():
    prompt = build_planning_prompt([0, 0, 1, 0], (4.6612, -0.0917), (0.1749, -1.5251), template="navsim")
    assert prompt == TRAINED_NAVSIM_PROMPT


def test_negative_zero_telemetry_prints_as_zero():
    prompt = build_planning_prompt("straight", (-0.0, -0.004), (-0.0049, 0.0))
    assert "The current velocity is: (0.00,0.00) and current accelerate is: (0.00,0.00)" in prompt
    assert "-0.00" not in prompt


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_telemetry_is_rejected(bad):
    with pytest.raises(ValueError, match="velocity y"):
        build_planning_prompt("left", (1.0, bad), (0.0, 0.0))
    with pytest.raises(ValueError, match="acceleration x"):
        build_planning_prompt("left", (1.0, 0.0), (bad, 0.0))


@pytest.mark.parametrize("bad", [(1.0,), (1.0, 2.0, 3.0), 5.0, "ab"])
def test_telemetry_must_be_pairs_of_numbers(bad):
    with pytest.raises(ValueError, match="velocity"):
        build_planning_prompt("left", bad, (0.0, 0.0))


def test_numpy_telemetry_is_accepted():
    prompt = build_planning_prompt(np.int64(2), np.array([4.66, -0.09]), (np.float32(0.17), np.float64(-1.53)))
    assert prompt == TRAINED_NAVSIM_PROMPT


# ----------------------------------------------------------------------------------------- format_number


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (4.66, "4.66"),
        (-0.09, "-0.09"),
        (0, "0.00"),
        (-0.0, "0.00"),
        (-0.004, "0.00"),
        (-0.0049999, "0.00"),
        (-0.005, "-0.01"),  # binary -0.005000000000000000104 rounds away from zero
        (0.005, "0.01"),
        (2.675, "2.67"),  # binary 2.67499999... (Python's .2f, not decimal half-up)
        (1.005, "1.00"),
        (0.125, "0.12"),  # exactly representable half: round half to even
        (0.375, "0.38"),
        (-2.675, "-2.67"),
        (123.456, "123.46"),
        (1e6, "1000000.00"),
        (np.float32(0.17), "0.17"),
    ],
)
def test_format_number(value, expected):
    assert format_number(value) == expected


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "1.0", None, True])
def test_format_number_rejects_non_finite_and_non_numbers(bad):
    with pytest.raises(ValueError):
        format_number(bad)


# ---------------------------------------------------------------------------------------------- commands


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("left", NavigationCommand.LEFT),
        ("  Straight\n", NavigationCommand.STRAIGHT),
        ("RIGHT", NavigationCommand.RIGHT),
        ("unknown", NavigationCommand.UNKNOWN),
        (0, NavigationCommand.LEFT),
        (1, NavigationCommand.STRAIGHT),
        (2, NavigationCommand.RIGHT),
        (3, NavigationCommand.UNKNOWN),
        (np.uint8(2), NavigationCommand.RIGHT),
        ([1, 0, 0, 0], NavigationCommand.LEFT),
        ((0.0, 1.0, 0.0, 0.0), NavigationCommand.STRAIGHT),
        (np.array([0.0, 0.0, 1.0, 0.0], dtype=np.float32), NavigationCommand.RIGHT),
        ([0, 0, 0, 1], NavigationCommand.UNKNOWN),
        ([0.0, 0.0, 0.9, 0.0], NavigationCommand.RIGHT),
        (NavigationCommand.LEFT, NavigationCommand.LEFT),
    ],
)
def test_parse_navigation_command(value, expected):
    assert parse_navigation_command(value) is expected


def test_command_order_matches_navsim_one_hot_and_text():
    for index, name in enumerate(["left", "straight", "right", "unknown"]):
        command = parse_navigation_command(index)
        assert command.value == name
        assert str(command) == name
        assert f"{command}" == name
        assert command.index == index
        one_hot = [0] * 4
        one_hot[index] = 1
        assert parse_navigation_command(one_hot) is command


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("north", "'north'"),
        ("", "''"),
        (4, "4"),
        (-1, "-1"),
        (2.0, "2.0"),
        (True, "True"),
        (None, "None"),
        ([0, 0, 0, 0], "[0, 0, 0, 0]"),
        ([1, 1, 0, 0], "[1, 1, 0, 0]"),
        ([0.6, 0.3, 0.0, 0.0], "[0.6, 0.3, 0.0, 0.0]"),
        ([0.6, 0.6, 0.0, 0.0], "[0.6, 0.6, 0.0, 0.0]"),
        ([0, 1, 0], "[0, 1, 0]"),
        ([0, 1, 0, 0, 0], "[0, 1, 0, 0, 0]"),
        ([0, float("nan"), 1, 0], "nan"),
        (["a", 1, 0, 0], "'a'"),
        (np.eye(4), "array"),
    ],
)
def test_parse_navigation_command_rejects_bad_values_naming_them(value, fragment):
    with pytest.raises(ValueError) as info:
        parse_navigation_command(value)
    assert fragment in str(info.value)


def test_planning_prompt_accepts_every_command_form():
    prompts = {
        build_planning_prompt(form, SAMPLE_VELOCITY, SAMPLE_ACCELERATION)
        for form in ("right", 2, [0, 0, 1, 0], NavigationCommand.RIGHT)
    }
    assert prompts == {TRAINED_NAVSIM_PROMPT}
    left = build_planning_prompt("left", SAMPLE_VELOCITY, SAMPLE_ACCELERATION)
    assert "The navigation information is: left\n" in left


# -------------------------------------------------------------------------------------- custom templates


def test_custom_template_is_used_verbatim():
    template = "<image>\nCommand: {command}. Speed ({vx}, {vy}); accel ({ax}, {ay}) at ({px},{py}). {{json}}"
    assert resolve_planning_template(template) == template
    prompt = build_planning_prompt("straight", (10.0, 0.126), (-0.5, 0.0), template=template)
    assert prompt == ("<image>\nCommand: straight. Speed (10.00, 0.13); accel (-0.50, 0.00) at (0.00,0.00). {json}")


def test_custom_template_may_omit_position():
    template = "<image> {command} v=({vx},{vy}) a=({ax},{ay})"
    assert build_planning_prompt(1, (1, 2), (3, 4), template=template) == (
        "<image> straight v=(1.00,2.00) a=(3.00,4.00)"
    )


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("<image> {command} {vx} {vy} {ax} {ay} {speed}", "{speed}"),
        ("<image> {command} {vx} {vy} {ax} {ay} {heading} {yaw}", "{heading}, {yaw}"),
        ("<image> {command} {vx} {vy} {ax} {ay} {", "stray braces"),
        ("<image> {command} {vx} {vy} {ax} {ay} }", "stray braces"),
        ("<image> {command} {vx} {vy} {ax} {ay} {}", "{}"),
        ("<image> {command} {vx} {vy} {ax} {ay} {0}", "{0}"),
        ("<image> {command} {vx:.3f} {vy} {ax} {ay}", "{vx:.3f}"),
        ("<image> {command!r} {vx} {vy} {ax} {ay}", "{command!r}"),
        ("<image> {command.value} {vx} {vy} {ax} {ay}", "{command.value}"),
        ("<image> {vx} {vy} {ax} {ay}", "{command}"),
        ("<image> {command} {vx} {ax} {ay}", "{vy}"),
        ("<image> {command} {vx} {vy}", "{ax}, {ay}"),
        ("{command} {vx} {vy} {ax} {ay}", "<image>"),
        ("navsm", "unknown planning template name 'navsm'"),
        ("", "unknown planning template name"),
    ],
)
def test_invalid_custom_templates_are_rejected_naming_the_problem(template, fragment):
    with pytest.raises(ValueError) as info:
        resolve_planning_template(template)
    assert fragment in str(info.value)
    with pytest.raises(ValueError):
        build_planning_prompt("left", (0, 0), (0, 0), template=template)


def test_template_must_be_a_string():
    with pytest.raises(ValueError, match="string"):
        resolve_planning_template(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- image counts


def test_multi_image_template_needs_matching_image_count():
    template = "Front: <image>\nBack: <image>\n{command} ({vx},{vy}) ({ax},{ay})"
    prompt = build_planning_prompt("left", (1, 0), (0, 0), template=template, num_images=2)
    assert prompt.count("<image>") == 2
    for wrong in (1, 3, 0):
        with pytest.raises(ValueError, match=r"2 <image> placeholder\(s\)"):
            build_planning_prompt("left", (1, 0), (0, 0), template=template, num_images=wrong)


def test_builtin_template_has_one_image():
    with pytest.raises(ValueError, match=r"1 <image> placeholder\(s\) but 2 image"):
        build_planning_prompt("left", (1, 0), (0, 0), num_images=2)
    with pytest.raises(ValueError, match="num_images"):
        build_planning_prompt("left", (1, 0), (0, 0), num_images=-1)


# ------------------------------------------------------------------------------------------ VQA and DET


def test_vqa_prompt():
    assert build_vqa_prompt("  What is the traffic light state?\n") == ("<image>What is the traffic light state?")
    assert build_vqa_prompt("Describe.", num_images=3) == "<image><image><image>Describe."
    assert build_vqa_prompt("Describe.", num_images=0) == "Describe."
    for bad in ("", "   \n", None):
        with pytest.raises(ValueError, match="question"):
            build_vqa_prompt(bad)  # type: ignore[arg-type]


def test_detection_prompt_exact_text():
    assert build_detection_prompt(["car", " pedestrian ", "traffic light"]) == (
        "<image>Locate every instance that belongs to the following categories: "
        "'car, pedestrian, traffic light'. Report bbox coordinates in JSON format."
    )
    assert build_detection_prompt(("car",), num_images=2) == (
        "<image><image>Locate every instance that belongs to the following categories: 'car'. "
        "Report bbox coordinates in JSON format."
    )
    assert build_detection_prompt("car, bus") == build_detection_prompt(["car", "bus"])


@pytest.mark.parametrize("bad", [[], ["car", " "], ["car", None], ""])
def test_detection_prompt_rejects_empty_categories(bad):
    with pytest.raises(ValueError, match="categor"):
        build_detection_prompt(bad)


# -------------------------------------------------------------------------------- message construction


def test_split_text_only_keeps_text_unstripped():
    text = "  <image> hello \n"
    assert split_prompt_with_images(text, []) == [{"type": "text", "text": text}]
    assert split_prompt_with_images(text, ()) == [{"type": "text", "text": text}]


def test_split_trained_sample_one_image():
    image = object()
    content = split_prompt_with_images(TRAINED_NAVSIM_PROMPT, [image])
    assert content == [
        {"type": "text", "text": "Here is a front-view images from a driving vehicle:"},
        {"type": "image", "image": image},
        {
            "type": "text",
            "text": (
                "The navigation information is: right\n"
                "The current position is (0.00,0.00)\n"
                "The current velocity is: (4.66,-0.09) and current accelerate is: (0.17,-1.53)\n"
                "Instruction: Based on the visual motion cues from the image (such as the relative speed "
                "of other vehicles and the changing distance to the intersection) and the provided "
                "telemetry, predict the optimal driving action for the next 4 seconds with 8 new waypoints."
            ),
        },
    ]
    assert content[1]["image"] is image


def test_split_leading_image_and_two_images_in_order():
    content = split_prompt_with_images("<image>\n  <image>  What changed?  ", ["A", "B"])
    assert content == [
        {"type": "image", "image": "A"},
        {"type": "image", "image": "B"},
        {"type": "text", "text": "What changed?"},
    ]
    content = split_prompt_with_images(" front: <image> back:\t<image>\n", ["A", "B"])
    assert content == [
        {"type": "text", "text": "front:"},
        {"type": "image", "image": "A"},
        {"type": "text", "text": "back:"},
        {"type": "image", "image": "B"},
    ]


def test_split_more_images_than_placeholders_as_in_the_reference():
    # The reference appends image i after text part i, for every part: with k placeholders there are
    # k + 1 parts, so image k lands after the last text and images beyond k + 1 are dropped.
    content = split_prompt_with_images("look <image> now", ["A", "B", "C"])
    assert content == [
        {"type": "text", "text": "look"},
        {"type": "image", "image": "A"},
        {"type": "text", "text": "now"},
        {"type": "image", "image": "B"},
    ]
    # No placeholder at all: the first image still follows the (only) text part.
    assert split_prompt_with_images("no placeholder", ["A", "B"]) == [
        {"type": "text", "text": "no placeholder"},
        {"type": "image", "image": "A"},
    ]


def test_split_fewer_images_than_placeholders_leaves_no_placeholder():
    content = split_prompt_with_images("a <image> b <image> c", ["A"])
    assert content == [
        {"type": "text", "text": "a"},
        {"type": "image", "image": "A"},
        {"type": "text", "text": "b"},
        {"type": "text", "text": "c"},
    ]
    assert all("<image>" not in item.get("text", "") for item in content)


def test_split_copies_image_fields_into_each_image():
    content = split_prompt_with_images(
        "<image><image>q", ["A", "B"], image_fields={"min_pixels": 12544, "max_pixels": 2073600}
    )
    assert content[0] == {"type": "image", "image": "A", "min_pixels": 12544, "max_pixels": 2073600}
    assert content[1] == {"type": "image", "image": "B", "min_pixels": 12544, "max_pixels": 2073600}
    assert content[2] == {"type": "text", "text": "q"}


def test_build_messages_with_and_without_system():
    assert build_messages("<image>hi", ["A"]) == [
        {"role": "user", "content": [{"type": "image", "image": "A"}, {"type": "text", "text": "hi"}]}
    ]
    messages = build_messages("hello", [], system="You are a driver.")
    assert messages == [
        {"role": "system", "content": [{"type": "text", "text": "You are a driver."}]},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    # An empty system prompt is a system turn, as in the reference script; None means none.
    assert build_messages("hello", [], system="")[0] == {
        "role": "system",
        "content": [{"type": "text", "text": ""}],
    }
