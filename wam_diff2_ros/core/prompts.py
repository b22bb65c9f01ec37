"""Prompt builders for WAM-Diff2: NAVSIM planning, VQA and detection, plus chat messages.

The planning prompt must match the text the model was trained on character for character
(see design notes §4). Templates are configuration: a built-in name from
:data:`PLANNING_TEMPLATES` or a custom text that uses the ``str.format`` fields
``{command} {px} {py} {vx} {vy} {ax} {ay}`` and one ``<image>`` placeholder per image.

Message content is built the way the reference inference script does it, so eval.json
samples give the same chat-template input here as there (see :func:`split_prompt_with_images`).
"""

from __future__ import annotations

import enum
import math
import numbers
import string
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

IMAGE_PLACEHOLDER = "<image>"


# str + Enum (not StrEnum): setup.py still allows Python 3.10; __str__ below gives the value.
class NavigationCommand(str, enum.Enum):  # noqa: UP042
    """High-level route command in NAVSIM one-hot order (index 0..3 = left, straight, right, unknown).

    The package's ``DrivingCommand.msg`` uses the same constants 0..3.
    """

    LEFT = "left"
    STRAIGHT = "straight"
    RIGHT = "right"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    @property
    def index(self) -> int:
        """Position of this command in the NAVSIM one-hot vector (0..3)."""
        return COMMAND_ORDER.index(self)


#: NAVSIM one-hot order; ``COMMAND_ORDER[i]`` is the command for index / hot entry ``i``.
COMMAND_ORDER: tuple[NavigationCommand, ...] = (
    NavigationCommand.LEFT,
    NavigationCommand.STRAIGHT,
    NavigationCommand.RIGHT,
    NavigationCommand.UNKNOWN,
)

# Entries of a one-hot vector other than the hot one must be this close to zero.
_ONE_HOT_ZERO_TOLERANCE = 1e-3


def _is_real_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def parse_navigation_command(value: Any) -> NavigationCommand:
    """Turn a command given as enum, name, index 0..3 or NAVSIM one-hot vector into a NavigationCommand.

    Strings are trimmed and case-insensitive (``left``/``straight``/``right``/``unknown``). A one-hot
    vector has 4 numbers with exactly one entry > 0.5 and the others ~0. Anything else raises
    ``ValueError`` naming the value.
    """
    if isinstance(value, NavigationCommand):
        return value
    if isinstance(value, str):
        name = value.strip().lower()
        for command in COMMAND_ORDER:
            if command.value == name:
                return command
        names = ", ".join(c.value for c in COMMAND_ORDER)
        raise ValueError(f"unknown navigation command {value!r}; expected one of {names}")
    if isinstance(value, bool):
        raise ValueError(f"navigation command must not be a bool, got {value!r}")
    if isinstance(value, numbers.Integral):
        index = int(value)
        if 0 <= index < len(COMMAND_ORDER):
            return COMMAND_ORDER[index]
        raise ValueError(f"navigation command index {index} is out of range 0..{len(COMMAND_ORDER) - 1}")
    if isinstance(value, numbers.Real):
        raise ValueError(f"navigation command index must be an integer 0..3, got {value!r}")
    entries = _as_vector(value)
    if entries is None:
        raise ValueError(
            f"cannot interpret {value!r} as a navigation command "
            "(expected a name, an index 0..3 or a one-hot vector of 4 numbers)"
        )
    return _command_from_one_hot(value, entries)


def _as_vector(value: Any) -> list[Any] | None:
    """The entries of a flat sequence or 1-D array, or None if ``value`` is not one."""
    if hasattr(value, "tolist") and hasattr(value, "ndim"):  # numpy arrays, without importing numpy
        if value.ndim != 1:
            return None
        return list(value.tolist())
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return list(value)
    return None


def _command_from_one_hot(original: Any, entries: list[Any]) -> NavigationCommand:
    if len(entries) != len(COMMAND_ORDER):
        raise ValueError(
            f"one-hot navigation command must have {len(COMMAND_ORDER)} entries, got {len(entries)}: {original!r}"
        )
    values: list[float] = []
    for entry in entries:
        if not isinstance(entry, numbers.Real) or not math.isfinite(float(entry)):
            raise ValueError(f"one-hot navigation command must contain finite numbers, got {original!r}")
        values.append(float(entry))
    hot = [i for i, v in enumerate(values) if v > 0.5]
    if len(hot) != 1:
        raise ValueError(f"one-hot navigation command needs exactly one entry > 0.5, got {len(hot)}: {original!r}")
    others_zero = all(abs(v) <= _ONE_HOT_ZERO_TOLERANCE for i, v in enumerate(values) if i != hot[0])
    if not others_zero:
        raise ValueError(f"one-hot navigation command has non-zero entries besides the hot one: {original!r}")
    return COMMAND_ORDER[hot[0]]


def format_number(value: float) -> str:
    """Format a telemetry number like the training data: two decimals, ``-0.00`` printed as ``0.00``.

    Rounding is Python's ``f"{v:.2f}"`` (round-half-even on the binary value, so 2.675 → ``2.67``).
    Non-finite values raise ``ValueError``.
    """
    if not _is_real_number(value):
        raise ValueError(f"expected a real number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"cannot format non-finite number {value!r}")
    text = f"{number:.2f}"
    if text == "-0.00":
        return "0.00"
    return text


NAVSIM_TEMPLATE = (
    "Here is a front-view images from a driving vehicle: <image>\n"
    "The navigation information is: {command}\n"
    "The current position is ({px},{py})\n"
    "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})\n"
    "Instruction: Based on the visual motion cues from the image (such as the relative speed of other "
    "vehicles and the changing distance to the intersection) and the provided telemetry, predict the "
    "optimal driving action for the next 4 seconds with 8 new waypoints."
)

MODEL_CARD_TEMPLATE = (
    "Here is a front-view image from a driving vehicle: <image>\n"
    "The navigation information is: {command}\n"
    "The current position is ({px},{py})\n"
    "The current velocity is: ({vx},{vy}) and current acceleration is: ({ax},{ay})\n"
    "Instruction: Predict the optimal driving action for the next 4 seconds with 8 new waypoints."
)

#: Built-in planning templates: ``navsim`` is the trained sample, ``model_card`` the model card's variant.
PLANNING_TEMPLATES: dict[str, str] = {
    "navsim": NAVSIM_TEMPLATE,
    "model_card": MODEL_CARD_TEMPLATE,
}

TEMPLATE_FIELDS: frozenset[str] = frozenset({"command", "px", "py", "vx", "vy", "ax", "ay"})
REQUIRED_TEMPLATE_FIELDS: tuple[str, ...] = ("command", "vx", "vy", "ax", "ay")


def template_fields(template: str) -> list[str]:
    """The ``str.format`` field names used by ``template``, in order (``ValueError`` for stray braces).

    Fields must be plain names: no positional ``{}``, no conversion (``!r``), format spec (``:.3f``),
    attribute or index access.
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"planning template has stray braces ({exc}); write literal braces as {{{{ }}}}") from exc
    fields: list[str] = []
    for _literal, field, spec, conversion in parsed:
        if field is None:
            continue
        if field == "" or not field.isidentifier():
            raise ValueError(
                f"planning template field {{{field}}} is not allowed; "
                f"known fields: {', '.join(sorted(TEMPLATE_FIELDS))}"
            )
        if spec or conversion:
            suffix = (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(
                f"planning template field {{{field}{suffix}}} must not have a conversion or format spec; "
                "numbers are already formatted with two decimals"
            )
        fields.append(field)
    return fields


def resolve_planning_template(name_or_text: str) -> str:
    """Return the text of a built-in template by name, or validate and return a custom template text.

    A custom template must contain ``{command}``, ``{vx} {vy} {ax} {ay}`` and at least one ``<image>``,
    and only the known fields (``{px} {py}`` are optional). Problems raise ``ValueError`` naming them.
    """
    if not isinstance(name_or_text, str):
        raise ValueError(f"planning template must be a string, got {type(name_or_text).__name__}")
    key = name_or_text.strip()
    if key in PLANNING_TEMPLATES:
        return PLANNING_TEMPLATES[key]
    looks_like_name = key.isidentifier() and "{" not in key
    if not key or looks_like_name:
        raise ValueError(
            f"unknown planning template name {name_or_text!r}; built-ins: {', '.join(PLANNING_TEMPLATES)} "
            "(or give a full template text)"
        )
    fields = template_fields(name_or_text)
    unknown = sorted({f for f in fields if f not in TEMPLATE_FIELDS})
    if unknown:
        raise ValueError(
            f"planning template has unknown fields {', '.join('{' + f + '}' for f in unknown)}; "
            f"known fields: {', '.join(sorted(TEMPLATE_FIELDS))}"
        )
    missing = [f for f in REQUIRED_TEMPLATE_FIELDS if f not in fields]
    if missing:
        raise ValueError(f"planning template lacks required fields {', '.join('{' + f + '}' for f in missing)}")
    if IMAGE_PLACEHOLDER not in name_or_text:
        raise ValueError(f"planning template has no {IMAGE_PLACEHOLDER} placeholder")
    return name_or_text


def _format_pair(name: str, pair: Sequence[float]) -> tuple[str, str]:
    try:
        values = tuple(pair)
    except TypeError as exc:
        raise ValueError(f"{name} must be an (x, y) pair, got {pair!r}") from exc
    if len(values) != 2:
        raise ValueError(f"{name} must be an (x, y) pair, got {len(values)} values: {pair!r}")
    formatted = []
    for axis, value in zip("xy", values, strict=True):
        try:
            formatted.append(format_number(value))
        except ValueError as exc:
            raise ValueError(f"{name} {axis} is invalid: {exc}") from exc
    return formatted[0], formatted[1]


def build_planning_prompt(
    command: Any,
    velocity: tuple[float, float],
    acceleration: tuple[float, float],
    template: str = "navsim",
    num_images: int = 1,
) -> str:
    """Build the NAVSIM planning prompt.

    ``velocity`` / ``acceleration`` are (x, y) in the ego frame (x forward, y left), m/s and m/s²,
    printed with :func:`format_number`; the position is always ``(0.00,0.00)``. ``template`` is a
    built-in name or a custom text; its ``<image>`` count must equal ``num_images``. Invalid
    (e.g. NaN) telemetry raises ``ValueError``.
    """
    nav = parse_navigation_command(command)
    vx, vy = _format_pair("velocity", velocity)
    ax, ay = _format_pair("acceleration", acceleration)
    text = resolve_planning_template(template)
    _check_image_count(text, num_images)
    origin = format_number(0.0)
    return text.format(command=nav.value, px=origin, py=origin, vx=vx, vy=vy, ax=ax, ay=ay)


def _check_num_images(num_images: int) -> int:
    if isinstance(num_images, bool) or not isinstance(num_images, numbers.Integral) or num_images < 0:
        raise ValueError(f"num_images must be a non-negative integer, got {num_images!r}")
    return int(num_images)


def _check_image_count(text: str, num_images: int) -> None:
    expected = _check_num_images(num_images)
    found = text.count(IMAGE_PLACEHOLDER)
    if found != expected:
        raise ValueError(
            f"planning template has {found} {IMAGE_PLACEHOLDER} placeholder(s) but {expected} image(s) are given"
        )


def build_vqa_prompt(question: str, num_images: int = 1) -> str:
    """``"<image>" * num_images + question`` with the question stripped (empty → ``ValueError``)."""
    count = _check_num_images(num_images)
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"VQA question must be a non-empty string, got {question!r}")
    return IMAGE_PLACEHOLDER * count + question.strip()


def build_detection_prompt(categories: Sequence[str], num_images: int = 1) -> str:
    """Qwen3-VL style grounding prompt for the given categories (joined with ``", "``).

    A single string is read as a comma-separated list. Each category is stripped; an empty list or an
    empty category raises ``ValueError``.
    """
    count = _check_num_images(num_images)
    items = categories.split(",") if isinstance(categories, str) else list(categories)
    if not items:
        raise ValueError("detection prompt needs at least one category")
    cleaned = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"detection category {i} must be a non-empty string, got {item!r}")
        cleaned.append(item.strip())
    joined = ", ".join(cleaned)
    return (
        IMAGE_PLACEHOLDER * count
        + f"Locate every instance that belongs to the following categories: '{joined}'. "
        + "Report bbox coordinates in JSON format."
    )


def split_prompt_with_images(
    text: str, images: Sequence[T], *, image_fields: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Message content for a user turn, built exactly like the reference inference script.

    With images, the text is split at each ``<image>``; for part ``i`` a stripped text entry is added
    if non-empty, then ``images[i]`` as ``{"type": "image", "image": ...}`` if it exists. Quirks kept
    for eval.json compatibility: with ``k`` placeholders there are ``k + 1`` parts, so one extra image
    lands after the last text part and any further images are dropped; placeholders without an image
    simply vanish. Callers that care must check the count themselves (:func:`build_planning_prompt`
    does). Without images the content is one unstripped text entry and ``<image>`` stays literal.
    ``image_fields`` (e.g. ``min_pixels``/``max_pixels``) are copied into every image entry.
    """
    if len(images) == 0:
        return [{"type": "text", "text": text}]
    extra = dict(image_fields or {})
    content: list[dict[str, Any]] = []
    for i, part in enumerate(text.split(IMAGE_PLACEHOLDER)):
        stripped = part.strip()
        if stripped:
            content.append({"type": "text", "text": stripped})
        if i < len(images):
            content.append({"type": "image", "image": images[i], **extra})
    return content


def build_messages(
    user_text: str,
    images: Sequence[Any],
    system: str | None = None,
    *,
    image_fields: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Chat messages: an optional system turn (``None`` = none; ``""`` is kept, as in the reference),
    then the user turn with :func:`split_prompt_with_images` content."""
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "user", "content": split_prompt_with_images(user_text, images, image_fields=image_fields)})
    return messages
