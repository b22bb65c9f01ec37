"""``resolve_model``: the one place that maps ``demo`` | ``tiny`` | a path to a checkpoint directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wam_diff2_ros.core.cache import CACHE_ENV
from wam_diff2_ros.core.checkpoint import inspect_checkpoint
from wam_diff2_ros.demo import ModelSpecError, resolve_model
from wam_diff2_ros.demo import expand as demo
from wam_diff2_ros.demo.resolve import is_model_name

pytestmark = pytest.mark.core


def test_a_path_is_returned_as_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model(tmp_path / "ckpt") == tmp_path / "ckpt"
    assert resolve_model("~/ckpt") == tmp_path / "ckpt"
    assert resolve_model("./demo") == Path("./demo")  # a directory that happens to be named like a model
    assert not is_model_name("./demo") and is_model_name(" Demo ") and is_model_name("tiny")


def test_demo_is_the_expanded_demo_checkpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []
    monkeypatch.setattr(demo, "demo_checkpoint", lambda: calls.append(1) or tmp_path)
    assert resolve_model(" DEMO ") == tmp_path and calls == [1]


def test_a_demo_model_that_cannot_be_produced_is_a_model_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Path:
        raise demo.DemoModelError("manifest.json: the demo model manifest is missing")

    monkeypatch.setattr(demo, "demo_checkpoint", missing)
    with pytest.raises(ModelSpecError, match=r"'demo' is not available: .*manifest"):
        resolve_model("demo")


def test_tiny_is_built_once_into_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = resolve_model("tiny")
    assert first == tmp_path / "cache" / "tiny-seed0"
    assert inspect_checkpoint(first).path == first  # a valid checkpoint directory
    assert json.loads((first / "config.json").read_text())["model_type"] == "wam_diff2"
    stamp = (first / "config.json").stat().st_mtime_ns
    assert resolve_model("tiny") == first and (first / "config.json").stat().st_mtime_ns == stamp  # reused
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no staging left behind
