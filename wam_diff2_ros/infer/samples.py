"""Reading a reference-format eval.json: the sample list, its chat and images, and the record of a sample."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LOG = logging.getLogger("wam-diff2-infer")


class UsageError(Exception):
    """Bad command line or input file: exit code 2, one message."""


def load_samples(path: Path) -> list[dict[str, Any]]:
    """The eval.json sample list; `UsageError` with one clear message when missing or malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"input file not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"input file is a directory: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read input file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"input file {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, list):
        raise UsageError(f"input file {path} must hold a JSON list of samples, got {type(data).__name__}")
    for index, sample in enumerate(data):
        if not isinstance(sample, dict):
            raise UsageError(f"input file {path}: sample {index} is a {type(sample).__name__}, not an object")
    return data


def image_paths(sample: dict[str, Any]) -> list[str]:
    """The sample's image entries as a list (a single string is one image)."""
    images = sample.get("image", [])
    if isinstance(images, str):
        return [images]
    if images is None:
        return []
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        raise ValueError("'image' must be a path or a list of paths")
    return images


def open_image(path: str, base_dir: Path) -> Any:
    """An RGB PIL image; relative paths are resolved against the eval.json folder."""
    from PIL import Image, UnidentifiedImageError

    resolved = Path(path).expanduser()
    if not resolved.is_absolute():
        resolved = base_dir / resolved
    try:
        with Image.open(resolved) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise ValueError(f"image not found: {resolved}") from None
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"cannot read image {resolved}: {exc}") from None


def build_conversation(sample: dict[str, Any], base_dir: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """Chat messages for a sample exactly as the reference builds them, and the opened images."""
    from wam_diff2_ros.core.prompts import split_prompt_with_images

    paths = image_paths(sample)
    conversations = sample.get("conversations") or []
    if not isinstance(conversations, list):
        raise ValueError("'conversations' must be a list")
    roles = {"system": "system", "human": "user", "gpt": "assistant"}
    messages: list[dict[str, Any]] = []
    images: list[Any] = []
    for turn in conversations:
        if not isinstance(turn, dict):
            raise ValueError("every conversation turn must be an object")
        role = roles.get(turn.get("from", ""))
        text = turn.get("value", "")
        if role is None:
            LOG.warning("sample %s: unknown role %r skipped", sample.get("id"), turn.get("from"))
            continue
        if not isinstance(text, str):
            raise ValueError(f"conversation value of role {turn.get('from')!r} is not a string")
        if role == "user" and paths:
            images = [open_image(p, base_dir) for p in paths]
            content = split_prompt_with_images(text, images)
        else:
            content = [{"type": "text", "text": text}]
        messages.append({"role": role, "content": content})
        if role == "user":
            break
    if not any(m["role"] == "user" for m in messages):
        raise ValueError("sample has no human turn")
    return messages, images


def question_of(sample: dict[str, Any]) -> str:
    """The reference's `question` field: the first conversation value."""
    conversations = sample.get("conversations") or []
    if conversations and isinstance(conversations[0], dict):
        return str(conversations[0].get("value", ""))
    return ""


def ground_truth_of(sample: dict[str, Any]) -> str:
    """The first `gpt` turn, or ""."""
    for turn in sample.get("conversations") or []:
        if isinstance(turn, dict) and turn.get("from") == "gpt":
            return str(turn.get("value", ""))
    return ""


def task_of(question: str) -> str:
    """`planning`, `detection` or `vqa`, judged from the prompt text."""
    lowered = question.lower()
    if "waypoint" in lowered:
        return "planning"
    if "bbox" in lowered or "locate every instance" in lowered:
        return "detection"
    return "vqa"


def parse_prediction(task: str, text: str, images: Sequence[Any], generation: Any = None) -> dict[str, Any]:
    """Structured reading of a prediction (waypoints, detections or a clean answer). A plan read from an engine's
    ``generation`` also carries its confidence per waypoint and overall (core/confidence.py; [] and null when
    the generation has no per-token probabilities)."""
    from wam_diff2_ros.core.confidence import generation_waypoint_probabilities, plan_confidence, waypoint_confidence
    from wam_diff2_ros.core.parsing import clean_answer, parse_detections, parse_waypoints

    if task == "planning":
        plan = parse_waypoints(text)
        probabilities = generation_waypoint_probabilities(generation, plan) if generation is not None else ()
        confidences = waypoint_confidence(probabilities) if probabilities else ()
        return {
            "task": task,
            "valid": plan.valid,
            "reason": plan.reason,
            "waypoints": [[w.x, w.y] for w in plan.waypoints],
            "yaw": [w.yaw for w in plan.waypoints],
            "waypoint_confidence": [round(c, 6) for c in confidences],
            "confidence": round(plan_confidence(confidences), 6) if confidences else None,
        }
    if task == "detection" and images:
        width, height = images[0].size
        found = parse_detections(text, width, height)
        return {
            "task": task,
            "detections": [
                {"label": d.label, "bbox": [d.x_min, d.y_min, d.x_max, d.y_max], "score": d.score}
                for d in found.detections
            ],
            "skipped": found.skipped,
            "repaired": found.repaired,
            "reason": found.reason,
        }
    return {"task": "vqa" if task != "detection" else task, "answer": clean_answer(text)}


def base_record(sample: dict[str, Any], index: int) -> dict[str, Any]:
    """The reference's fields for a sample before its prediction is known."""
    return {
        "id": sample.get("id", index),
        "datasource": sample.get("datasource", "navsim"),
        "image": sample.get("image", []),
        "question": question_of(sample),
        "prediction": "",
        "ground_truth": ground_truth_of(sample),
    }
