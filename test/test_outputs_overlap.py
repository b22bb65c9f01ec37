"""Where the fleet and the replay write: each bag's result folder is a slug of its name inside ``--out/bags``, the
fleet never reads its own results as bags, never replaces a folder that is not its own result, and neither writes
into a bag or replaces one with its outputs, ``--overwrite`` or not. Every refusal comes before anything is written
(no Ray, no model run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wam_diff2_ros.cli.fleet import main as fleet_main
from wam_diff2_ros.core.safe_names import MAX_NAME_CHARS, safe_name
from wam_diff2_ros.fleet.bags import FleetUsageError, find_bags

EXIT_USAGE = 2
NAMES = ["...", " spaced out ", "Straße 日本", "x" * 200, "line\nbreak", "<script>alert(1)</script>", "-rf", "ok"]


def _bag(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "metadata.yaml").write_text("x", encoding="utf-8")
    return path


def test_bag_names_become_distinct_slugs(tmp_path: Path) -> None:
    for name in NAMES:
        _bag(tmp_path / "drives" / name)
    _bag(tmp_path / "other" / "OK")  # differs from "ok" only in case: one folder on a case-insensitive system
    entries = find_bags([tmp_path / "drives", tmp_path / "other"])
    names = [e.name for e in entries]
    assert len(set(n.casefold() for n in names)) == len(NAMES) + 1
    for entry in entries:
        assert entry.name.startswith(safe_name(entry.path.name)) and len(entry.name) <= MAX_NAME_CHARS + 9
        assert entry.name.isascii() and "/" not in entry.name and not entry.name.startswith((".", "-"))
        assert (tmp_path / "out" / entry.name).resolve().parent == (tmp_path / "out").resolve()


def test_the_fleet_never_reads_or_replaces_what_is_not_its_own(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    bag = _bag(data / "bags" / "drive1")
    # --out above the bags: OUT/bags/drive1 would be the input bag itself (its result would replace it)
    assert fleet_main([str(data / "bags"), "--out", str(data), "--model", "tiny"]) == EXIT_USAGE
    assert "inside --out" in capsys.readouterr().err and (bag / "metadata.yaml").read_text() == "x"
    # --out inside a bag
    assert fleet_main([str(bag), "--out", str(bag / "eval"), "--model", "tiny"]) == EXIT_USAGE
    assert "overlap" in capsys.readouterr().err and not (bag / "eval").exists()
    # a folder of bags that holds --out: the fleet's own outputs are not searched for bags
    _bag(data / "eval" / "bags" / "drive1" / "out")  # as a replay's output bag
    assert [e.path for e in find_bags([data], data / "eval")] == [bag.resolve()]
    with pytest.raises(FleetUsageError, match="inside --out"):
        find_bags([data / "eval" / "bags" / "drive1" / "out"], data / "eval")
    manifest = tmp_path / "list.txt"
    manifest.write_text(f"{data / 'bags' / 'drive1'}\n", encoding="utf-8")
    with pytest.raises(FleetUsageError, match="overlap"):  # named by a manifest
        find_bags([manifest], data)
    # a result folder that is not a fleet result is never replaced
    out = tmp_path / "eval"
    mine = out / "bags" / "drive1"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    assert fleet_main([str(data / "bags"), "--out", str(out), "--model", "tiny"]) == EXIT_USAGE
    assert "not a fleet result" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == ["bags", "drive1", "notes.txt"]


def test_the_replay_never_writes_over_or_into_its_bag(tmp_path: Path, capsys) -> None:
    pytest.importorskip("rclpy", reason="the replay needs rclpy (install the PyPI ROS 2 wheels)")
    from wam_diff2_ros.cli.replay import main as replay_main
    from wam_diff2_ros.sim import make_sample_bag

    bag = make_sample_bag(tmp_path / "runs" / "out", seconds=1.0, width=160, height=120).path  # named as out/
    before = sorted((p.name, p.stat().st_size) for p in bag.iterdir())
    for out in (tmp_path / "runs", bag, bag / "eval"):  # its out/ would be the bag; --out is the bag; inside it
        assert replay_main([str(bag), "--out", str(out), "--model", "tiny", "--overwrite"]) == EXIT_USAGE
        assert "overlap" in capsys.readouterr().err
    assert sorted((p.name, p.stat().st_size) for p in bag.iterdir()) == before
