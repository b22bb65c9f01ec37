"""Where several closed-loop episodes write: one folder per scenario inside --out whatever the scenario is named,
checked before anything runs, nothing replaced without --overwrite, and a pooled table no name can break."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from wam_diff2_ros.core.safe_names import safe_name
from wam_diff2_ros.drive.batch import run_many, write_table
from wam_diff2_ros.drive.episode import EpisodeOptions
from wam_diff2_ros.drive.folders import episode_folders
from wam_diff2_ros.drive.run import DriveUsageError
from wam_diff2_ros.drive.world import load_scenarios

REPO = Path(__file__).resolve().parents[1]
HOSTILE = '<img src=x onerror="alert(1)">|<script>alert(2)</script>\n# injected'


def _scenarios(path: Path, *names: str) -> Path:
    road = {"road": [{"straight": 600}], "speed_mps": 5}
    path.write_text(yaml.safe_dump({"scenarios": [{"name": n, **road} for n in names]}), encoding="utf-8")
    return path


def _never_finished(_spec: object, _folder: Path) -> None:
    return None


def test_a_scenario_named_dot_dot_writes_inside_out_and_touches_nothing_else(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "episode").mkdir(parents=True)
    (victim / "score.json").write_text("keep me", encoding="utf-8")
    (victim / "episode" / "file").write_text("keep me too", encoding="utf-8")
    absolute, dots, long_unicode = str(tmp_path / "absolute"), "...", "é" * 300
    names = ["../victim", HOSTILE, absolute, dots, long_unicode]
    scenarios = _scenarios(tmp_path / "s.yaml", *names)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "wam_diff2_ros.cli.drive", str(scenarios), "--model", "tiny", "--out", str(out)]
    command += ["--duration", "0.3", "--latency-ms", "100", "--size", "320x180", "--no-video"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (victim / "score.json").read_text(encoding="utf-8") == "keep me"
    assert (victim / "episode" / "file").read_text(encoding="utf-8") == "keep me too"
    assert sorted(p.name for p in victim.rglob("*")) == ["episode", "file", "score.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml", "victim"]  # nothing else outside --out
    folders = [safe_name(name) for name in names]
    assert {p.name for p in out.iterdir()} == {*folders, "scores.json", "scores.md"}
    for name, folder in zip(names, folders, strict=True):
        document = json.loads((out / folder / "score.json").read_text(encoding="utf-8"))
        assert document["scenario"]["name"] == name  # the records keep the name as it is
    table = (out / "scores.md").read_text(encoding="utf-8")
    assert "<img" not in table and "<script" not in table and "\n# injected" not in table
    lines = table.strip().split("\n")
    assert len(lines) == 8 and all(line.replace("\\|", "").count("|") == 13 for line in lines)
    assert [row["scenario"] for row in json.loads((out / "scores.json").read_text())["episodes"]] == names


def test_folders_are_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    specs = load_scenarios(str(_scenarios(tmp_path / "a.yaml", "Same", "same")))
    with pytest.raises(DriveUsageError, match=r"'same'.*'Same'|'Same'.*'same'"):
        episode_folders(out, specs, False, _never_finished)
    reserved = load_scenarios(str(_scenarios(tmp_path / "b.yaml", "scores.json")))
    with pytest.raises(DriveUsageError, match=r"the output scores\.json"):
        episode_folders(out, reserved, False, _never_finished)
    assert not out.exists()

    specs = load_scenarios(str(_scenarios(tmp_path / "c.yaml", "one", "two")))
    (out / "one").mkdir(parents=True)
    (out / "one" / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(DriveUsageError, match=r"not episode outputs \(notes.txt\).*--overwrite"):
        episode_folders(out, specs, False, _never_finished)
    (out / "one" / "notes.txt").unlink()
    (out / "one" / "score.json").write_text(json.dumps({"scenario": {"name": "other"}}), encoding="utf-8")
    with pytest.raises(DriveUsageError, match="another scenario's episode"):
        episode_folders(out, specs, False, _never_finished)
    (out / "one" / "score.json").write_text(json.dumps({"scenario": {"name": "one"}}), encoding="utf-8")
    with pytest.raises(DriveUsageError, match="finished episode with other settings"):
        episode_folders(out, specs, False, _never_finished)
    # run_many refuses it before it writes anything (no engine is needed to find that out)
    options = EpisodeOptions(out=out, latency_ms=100.0, video=False)
    with pytest.raises(DriveUsageError, match="finished episode with other settings"):
        run_many(specs, options, SimpleNamespace(model_path="tiny"), engine=None, log=lambda _t: None)
    assert sorted(p.name for p in out.rglob("*")) == ["one", "score.json"]
    # an unfinished run of the same episode is run again; --overwrite replaces anything; a finished one is kept
    (out / "one" / "score.json").write_text(json.dumps({"scenario": {"name": "one"}, "interrupted": True}))
    assert episode_folders(out, specs, False, _never_finished)["one"] == out / "one"
    (out / "one" / "score.json").unlink()
    (out / "one" / "episode").mkdir()
    assert episode_folders(out, specs, False, _never_finished)["two"] == out / "two"
    (out / "one" / "notes.txt").write_text("mine", encoding="utf-8")
    assert episode_folders(out, specs, True, _never_finished)["one"] == out / "one"
    assert episode_folders(out, specs, False, lambda _s, _f: {"kept": True})["one"] == out / "one"


def test_scores_md_keeps_every_name_a_cell(tmp_path: Path) -> None:
    row = {"scenario": HOSTILE, "seed": 1, "pdms": 0.5, "nc": None, "dac": 1.0, "ep": 0.2, "ttc": 1.0, "c": 1.0}
    row |= {"lane_dev_mean_m": 0.1, "plans_valid": 1, "plans_made": 2, "simulated_s": 1.0}
    row["stop_reason"] = "\ud800|" + "x" * 5000
    write_table(tmp_path, [row])
    table = (tmp_path / "scores.md").read_text(encoding="utf-8")
    assert "<img" not in table and "<script" not in table and "&lt;img" in table and "\ufffd" in table
    lines = table.strip().split("\n")
    assert len(lines) == 4 and all(line.replace("\\|", "").count("|") == 13 for line in lines)
    assert len(table) < 3000  # the long reason is shortened in the table ...
    assert json.loads((tmp_path / "scores.json").read_text())["episodes"][0]["stop_reason"].endswith("x" * 5000)


def test_the_console_script_refuses_a_foreign_folder_before_loading_the_model(tmp_path: Path, capsys) -> None:
    from wam_diff2_ros.cli.drive import main

    out = tmp_path / "out"
    (out / "one").mkdir(parents=True)
    (out / "one" / "notes.txt").write_text("mine", encoding="utf-8")
    scenarios = _scenarios(tmp_path / "s.yaml", "one", "two")
    model = tmp_path / "no_model_here"  # never loaded: the refusal comes first
    model.mkdir()
    assert main([str(scenarios), "--model", str(model), "--out", str(out)]) == 2
    assert "not episode outputs (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == ["notes.txt", "one"]
