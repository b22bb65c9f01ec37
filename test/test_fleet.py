"""``wam-diff2-fleet``: real bags (the synthetic drive written with the package's BagWriter; a truncated one; one
without odometry), the tiny random checkpoint through the real decoder, and a real embedded Ray runtime (2 CPUs, no
dashboard, a small object store, shut down after each run).

Covers: one bag gives the same predictions as ``wam-diff2-replay``; a run over a manifest and folders with a
damaged bag, a bag without odometry and a missing path; the pooled metrics against the per-bag ones; a rerun that
redoes nothing, then only the bag that changed; a worker killed mid-bag (replaced, its bag retried, every result
identical to the clean run) and a bag whose worker dies every time (recorded, the others complete); bag discovery
and result keys; the command line.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
pytest.importorskip("ray", reason="ray is not installed (the fleet extra)")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core_helpers import tiny_checkpoint
from listening import ListeningSampler, process_tree

from wam_diff2_ros.cli.fleet import main as fleet_main
from wam_diff2_ros.cli.replay import main as replay_main
from wam_diff2_ros.fleet import (
    DONE,
    EXIT_OK,
    EXIT_SOME_FAILED,
    EXIT_USAGE,
    FAILED,
    Fingerprints,
    FleetOptions,
    FleetUsageError,
    RayConfig,
    find_bags,
    result_key,
    run_fleet,
)
from wam_diff2_ros.fleet.results import BagRecord, commit, new_tmp_dir, read_record, reusable
from wam_diff2_ros.fleet.worker import CRASH_ENV
from wam_diff2_ros.replay import ReplayOptions

FAST = ["--set", "decoding.max_new_tokens=32", "--set", "decoding.denoising_steps=4"]
FAST_SET = {"decoding.max_new_tokens": 32, "decoding.denoising_steps": 4}
SMALL_RAY = RayConfig(workers=2, num_cpus=2, object_store_mb=100)


def make_bag(path: Path, seed: int, seconds: float = 2.0, width: int = 160, height: int = 96, **kwargs: Any) -> Path:
    from wam_diff2_ros.sim import make_sample_bag

    return make_sample_bag(path, seconds=seconds, seed=seed, width=width, height=height, **kwargs).path


def truncate(bag: Path, fraction: float = 0.6) -> Path:
    storage = next(bag.glob("*.mcap"))
    data = storage.read_bytes()
    storage.write_bytes(data[: int(len(data) * fraction)])
    return bag


def predictions(folder: Path) -> list[dict[str, Any]]:
    """A replay's predictions without the wall-clock timings (everything else is deterministic)."""
    lines = (folder / "predictions.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "timing"} for line in lines]


def fleet(inputs: list[Path], out: Path, **replay: Any) -> Any:
    options = ReplayOptions(bag=inputs[0], out=out, model=str(tiny_checkpoint()), overrides=dict(FAST_SET), **replay)
    return run_fleet(FleetOptions(inputs=inputs, out=out, replay=options, ray=SMALL_RAY), stream=io.StringIO())


@pytest.fixture(scope="module")
def drives(tmp_path_factory) -> Path:
    """Four bags of different lengths, seeds and image sizes, one truncated, one without odometry."""
    root = tmp_path_factory.mktemp("drives")
    make_bag(root / "a" / "long", seed=1, seconds=2.5)
    make_bag(root / "a" / "wide", seed=2, width=224, height=128)
    truncate(make_bag(root / "b" / "damaged", seed=3))
    make_bag(root / "b" / "no_odom", seed=4, seconds=1.5, without=("odometry",))
    return root


# --- one code path ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_one_bag_gives_the_same_predictions_as_the_replay(tmp_path: Path) -> None:
    bag = make_bag(tmp_path / "drive", seed=7, seconds=1.5)
    model = str(tiny_checkpoint())
    assert replay_main([str(bag), "--out", str(tmp_path / "replay"), "--model", model, *FAST, "--no-progress"]) == 0
    argv = [str(bag), "--out", str(tmp_path / "fleet"), "--model", model, *FAST, "--workers", "1", "--num-cpus", "2"]
    with ListeningSampler() as sockets:
        assert fleet_main([*argv, "--no-progress"]) == EXIT_OK
    # every port the run's process tree opened (Ray's GCS, raylet, agents, the worker, the driver) is on loopback
    names = sockets.processes()
    assert {"gcs_server", "raylet"} <= names and any(n.startswith("ray::BagWorker") for n in names), names
    assert not sockets.exposed()
    single, bag_dir = tmp_path / "replay", tmp_path / "fleet" / "bags" / "drive"
    assert predictions(bag_dir) and predictions(bag_dir) == predictions(single)
    for name in (
        "out/metadata.yaml",
        "metrics.json",
        "summary.txt",
        "report.html",
        "plots/bev.png",
        "fleet.json",
        "odometry.json",
    ):
        assert (bag_dir / name).is_file(), name
    assert str(bag_dir) in (bag_dir / "summary.txt").read_text()  # names its files where they are now
    report = json.loads((tmp_path / "fleet" / "fleet_report.json").read_text())
    recomputed, replayed = report["bags"][0], json.loads((single / "metrics.json").read_text())
    for key in ("ade_1s", "fde_1s", "ade_2s", "fde_2s", "count_1s", "count_2s"):
        assert recomputed[key] == pytest.approx(replayed[key]), key
    assert report["pooled"]["ade_1s"] == pytest.approx(replayed["ade_1s"])


# --- many bags, rerun, a killed worker -----------------------------------------------------------------------------


@pytest.mark.slow
def test_fleet_run_rerun_and_killed_workers(drives: Path, tmp_path: Path, monkeypatch) -> None:
    manifest = tmp_path / "bags.txt"
    manifest.write_text(f"# the fleet\n{drives / 'a'}\n../{tmp_path.name}/missing_bag\n", encoding="utf-8")
    inputs = [manifest, drives / "b"]
    clean = fleet(inputs, tmp_path / "clean")
    by_name = {r.name: r for r in clean.records}
    assert clean.exit_code == EXIT_SOME_FAILED
    assert set(by_name) == {"long", "wide", "missing_bag", "damaged", "no_odom"}
    assert by_name["missing_bag"].status == FAILED and "no such file" in by_name["missing_bag"].reason
    assert by_name["damaged"].status == DONE and by_name["damaged"].exit_code == 3 and by_name["damaged"].reason
    assert by_name["no_odom"].status == DONE and by_name["no_odom"].exit_code == 4
    assert by_name["long"].exit_code == 0 and by_name["wide"].exit_code == 0

    report = json.loads((tmp_path / "clean" / "fleet_report.json").read_text())
    bags = {b["name"]: b for b in report["bags"]}
    replayed = [bags[n] for n in ("long", "wide", "damaged", "no_odom")]
    for key in ("plans", "valid", "planning_instants", "blocked"):
        assert report["pooled"][key] == sum(b[key] for b in replayed), key
    assert report["pooled"]["plans"] > 0 and bags["no_odom"]["blocked"] == bags["no_odom"]["planning_instants"] > 0
    assert report["failures"] == [{"name": "missing_bag", "reason": by_name["missing_bag"].reason}]
    assert report["pooled"]["by_speed"]["6-10 m/s"]["plans"] == report["pooled"]["plans"]
    assert "| [long](bags/long/report.html)" in (tmp_path / "clean" / "fleet_report.md").read_text()  # its page
    summary = json.loads((tmp_path / "clean" / "fleet_summary.json").read_text())
    assert summary["replayed"] == 4 and summary["failed"] == 1 and summary["workers"] == 2

    # a rerun redoes nothing that is complete (the missing bag is tried again, and fails again)
    stamps = {n: (tmp_path / "clean" / "bags" / n / "fleet.json").stat().st_mtime_ns for n in ("long", "wide")}
    again = fleet(inputs, tmp_path / "clean")
    assert again.summary["replayed"] == 0 and again.summary["skipped"] == 4
    assert {n: (tmp_path / "clean" / "bags" / n / "fleet.json").stat().st_mtime_ns for n in stamps} == stamps

    # a bag whose content changed is redone, alone
    before = predictions(tmp_path / "clean" / "bags" / "wide")
    make_bag(drives / "a" / "wide", seed=5, width=224, height=128, overwrite=True)
    changed = fleet(inputs, tmp_path / "clean")
    assert changed.summary["replayed"] == 1 and changed.summary["skipped"] == 3
    assert predictions(tmp_path / "clean" / "bags" / "wide") != before

    # workers killed mid-bag: "long" on its first attempt (retried on a new worker), "wide" on every attempt
    monkeypatch.setenv(CRASH_ENV, "long,wide:always")
    killed = fleet(inputs, tmp_path / "killed")
    records = {r.name: r for r in killed.records}
    assert records["long"].status == DONE and records["long"].attempts == 2
    assert (
        records["wide"].status == FAILED and records["wide"].attempts == 2 and "worker died" in records["wide"].reason
    )
    assert len(killed.notes) == 3 and all("worker replaced" in note for note in killed.notes)
    for name in ("long", "damaged", "no_odom"):
        assert predictions(tmp_path / "killed" / "bags" / name) == predictions(tmp_path / "clean" / "bags" / name)
    assert not list((tmp_path / "killed" / "bags").glob(".tmp-*"))  # the killed attempts' half-written folders


@pytest.mark.slow
def test_embedded_ray_runs_with_a_private_token_for_the_run(monkeypatch) -> None:
    from wam_diff2_ros.fleet.pool import ray_session

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # no cluster there: the embedded Ray starts all the same
    before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    with ray_session(RayConfig(num_cpus=1, object_store_mb=100)) as ray:
        token = Path(os.environ["RAY_AUTH_TOKEN_PATH"])
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and stat.S_IMODE(token.parent.stat().st_mode) == 0o700
        assert len(token.read_text()) == 64 and ray.util.get_node_ip_address() == "127.0.0.1"
        ray_processes = {Path(f"/proc/{pid}/comm").read_text().strip(): pid for pid in process_tree(os.getpid())}
        environ = Path(f"/proc/{ray_processes['gcs_server']}/environ").read_bytes().split(b"\0")
        assert b"RAY_AUTH_MODE=token" in environ and f"RAY_AUTH_TOKEN_PATH={token}".encode() in environ
    assert not token.parent.exists()  # the token lives as long as the run's Ray
    assert {k: os.environ.get(k) for k in before} == before


# --- pieces ---------------------------------------------------------------------------------------------------------


def test_find_bags_reads_folders_files_and_manifests(tmp_path: Path) -> None:
    for name in ("x/one", "y/one"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "metadata.yaml").write_text("x")
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "loose.mcap").write_bytes(b"0" * 10)
    manifest = tmp_path / "list.txt"
    manifest.write_text("x/one  # a comment\n\nz/loose.mcap\nnot_here\n")
    entries = find_bags([tmp_path / "y", manifest, tmp_path / "x"])
    names = [e.name for e in entries]
    assert len(entries) == 4 and names[2] == "loose" and entries[2].size_bytes == 10
    assert names[0].startswith("one-") and names[1].startswith("one-") and names[0] != names[1]
    assert entries[3].name == "not_here" and "list.txt line 4: no such file" in entries[3].missing
    (tmp_path / "empty").mkdir()
    with pytest.raises(FleetUsageError, match="no bag inside"):
        find_bags([tmp_path / "empty"])
    with pytest.raises(FleetUsageError, match="no such file"):
        find_bags([tmp_path / "nothing"])


def test_result_key_follows_content_and_settings(tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "metadata.yaml").write_text("a")
    entry = find_bags([bag])[0]
    prints = Fingerprints(tmp_path / "hashes.json")
    first = prints.bag(entry)
    assert Fingerprints(None).bag(entry) == first
    (bag / "metadata.yaml").write_text("b")
    assert prints.bag(entry) != first
    assert result_key(first, {"rate_hz": 1.0}) != result_key(first, {"rate_hz": 2.0})


def test_commit_replaces_a_result_whole(tmp_path: Path) -> None:
    for status, key in ((FAILED, "k1"), (DONE, "k2")):
        tmp = new_tmp_dir(tmp_path, "bag")
        (tmp / "predictions.jsonl").write_text(status)
        commit(tmp, tmp_path, BagRecord(name="bag", bag="/b", status=status, key=key))
    assert read_record(tmp_path, "bag").key == "k2" and reusable(tmp_path, "bag", "k2") is not None
    assert reusable(tmp_path, "bag", "k1") is None
    assert [p.name for p in (tmp_path / "bags").iterdir()] == ["bag"]


def _scripted_bag(out: Path, name: str, speed: float, plans: list[tuple[float, float | None]]) -> BagRecord:
    """A committed result of a straight drive at ``speed`` (odometry every 0.1 s for 10 s) whose plans are at
    ``(t, error)``: every waypoint ``error`` metres ahead of the truth, or invalid when ``error`` is None."""
    t0 = 1_700_000_000 * 10**9
    tmp = new_tmp_dir(out, name)
    odometry = [[t0 + k * 10**8, speed * k / 10, 0.0, 0.0] for k in range(101)]
    (tmp / "odometry.json").write_text(json.dumps(odometry))
    lines = []
    for t, error in plans:
        waypoints = None if error is None else [[speed * 0.5 * (i + 1) + error, 0.0] for i in range(8)]
        lines.append(
            {
                "t_s": t,
                "status": "planned",
                "stamp_ns": t0 + round(t * 10**9),
                "valid": error is not None,
                "reason": None if error is not None else "no waypoints",
                "waypoints": waypoints,
                "command": "go straight",
                "velocity": [speed, 0.0],
                "timing": {"total_ms": 100.0},
            }
        )
    (tmp / "predictions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    record = BagRecord(name=name, bag=f"/bags/{name}", status=DONE, plans=len(plans))
    commit(tmp, out, record)
    return record


def test_report_pools_instants_across_bags(tmp_path: Path) -> None:
    from wam_diff2_ros.fleet.report import build_report, write_report

    records = [
        _scripted_bag(tmp_path, "slow", 4.0, [(1.0, 1.0), (2.0, 1.0)]),
        _scripted_bag(tmp_path, "fast", 12.0, [(1.0, 4.0), (2.0, None)]),
        BagRecord(name="broken", bag="/bags/broken", status=FAILED, reason="cannot open the bag: no metadata"),
    ]
    report = build_report(tmp_path, records, {"model": "m"})
    bags = {b["name"]: b for b in report["bags"]}
    assert bags["slow"]["ade_4s"] == pytest.approx(1.0) and bags["fast"]["fde_4s"] == pytest.approx(4.0)
    assert bags["fast"]["valid_rate"] == 0.5 and bags["broken"]["status"] == FAILED
    pooled = report["pooled"]
    assert pooled["plans"] == 4 and pooled["valid"] == 3 and pooled["valid_rate"] == 0.75
    for h in ("1s", "2s", "3s", "4s"):  # over instants: (1 + 1 + 4) / 3, not the mean of the bags' 1 and 4
        assert pooled[f"ade_{h}"] == pytest.approx(2.0) and pooled[f"count_{h}"] == 3
    assert pooled["by_speed"]["3-6 m/s"]["ade_4s"] == pytest.approx(1.0)
    assert pooled["by_speed"]["10-15 m/s"]["fde_4s"] == pytest.approx(4.0)
    assert pooled["by_command"]["go straight"]["count"] == 3
    assert [b["name"] for b in report["worst_bags"]] == ["fast", "slow"]
    assert report["worst_plans"][0]["bag"] == "fast" and report["worst_plans"][0]["fde_4s"] == pytest.approx(4.0)
    assert report["invalid_plans"] == [
        {
            "bag": "fast",
            "t_s": 2.0,
            "stamp_ns": report["invalid_plans"][0]["stamp_ns"],
            "command": "go straight",
            "speed_mps": 12.0,
            "reason": "no waypoints",
        }
    ]
    assert report["failures"] == [{"name": "broken", "reason": "cannot open the bag: no metadata"}]
    paths = write_report(tmp_path, report)
    assert {p.name for p in paths} == {"fleet_report.json", "fleet_report.md", "error_over_horizon.png", "bags.png"}
    text = (tmp_path / "fleet_report.md").read_text()
    assert "| broken | failed: cannot open the bag: no metadata |" in text and "2.00 / 2.00" in text


def test_markdown_report_carries_no_markup_from_names_or_reasons(tmp_path: Path) -> None:
    from wam_diff2_ros.fleet.report import build_report
    from wam_diff2_ros.fleet.report_text import markdown

    hostile = '<img src=x onerror="alert(1)">'
    records = [
        _scripted_bag(tmp_path, hostile, 4.0, [(1.0, 1.0), (2.0, None)]),
        _scripted_bag(tmp_path, "x](javascript:alert(1))", 4.0, [(1.0, 2.0)]),
        BagRecord(name="broken", bag="/b", status=FAILED, reason="<!--<script>|\nnext &amp;"),
    ]
    for name in (hostile, records[1].name):
        (tmp_path / "bags" / name / "report.html").write_text("x")  # linked from its rows
    text = markdown(build_report(tmp_path, records, {"model": "</script>"}))
    assert "<" not in text and ">" not in text  # no tag, no comment can open
    assert f'[&lt;img src=x onerror="alert(1)"&gt;](bags/{quote(hostile)}/report.html)' in text
    assert "| [x\\](javascript:alert(1))](bags/x%5D%28javascript%3Aalert%281%29%29/report.html) |" in text
    assert "| broken | failed: &lt;!--&lt;script&gt;\\| next &amp;amp; |" in text  # one row, inert
    assert "Model &lt;/script&gt;" in text


def test_report_pools_candidate_figures(tmp_path: Path) -> None:
    """Candidate batches' records: per bag and pooled, the chosen plans' score–error ranking, the rescues."""
    from wam_diff2_ros.fleet.report import build_report, write_report
    from wam_diff2_ros.fleet.results import bags_root

    records = [
        _scripted_bag(tmp_path, "a", 8.0, [(1.0, 0.5), (2.0, 1.0), (3.0, None)]),
        _scripted_bag(tmp_path, "b", 8.0, [(1.0, 2.0), (2.0, 3.0)]),
    ]
    scores = {"a": [0.9, 0.6, 0.0], "b": [0.4, 0.2]}
    for name, bag_scores in scores.items():
        path = bags_root(tmp_path) / name / "predictions.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line, score in zip(lines, bag_scores, strict=True):
            greedy_ok = name == "a"
            line.update(
                confidence=score,
                waypoint_confidence=[score] * 8 if line["valid"] else [],
                chosen_candidate=(0 if greedy_ok else 1) if line["valid"] else -1,
                candidates=[
                    {"index": 0, "valid": greedy_ok and line["valid"], "score": score, "reason": ""},
                    {"index": 1, "valid": line["valid"], "score": score, "reason": ""},
                ],
            )
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = build_report(tmp_path, records, {"model": "m"})
    pooled = report["pooled"]["candidates"]
    assert pooled["candidates"] == 2 and pooled["plans"] == 5 and pooled["valid_rate"] == pytest.approx(0.8)
    assert pooled["score_spearman_vs_ade_4s"] == pytest.approx(-1.0) and pooled["scored_plans"] == 4
    assert pooled["greedy_rejected_sampled_published"] == 2 and pooled["chosen_rows"] == {"0": 2, "1": 2}
    assert {b["name"]: b["candidates"]["plans"] for b in report["bags"]} == {"a": 3, "b": 2}
    write_report(tmp_path, report)
    assert (
        "Candidates: 2 per plan; score (confidence) vs ADE 4 s Spearman -1.00 over 4 plans"
        in (tmp_path / "fleet_report.md").read_text()
    )


def test_command_line_errors(tmp_path: Path, capsys) -> None:
    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "metadata.yaml").write_text("x")
    assert fleet_main([str(bag), "--out", str(tmp_path / "o"), "--workers", "0"]) == EXIT_USAGE
    assert "--workers must be >= 1" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert fleet_main([str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--model", "tiny"]) == EXIT_USAGE
    assert "no bag inside" in capsys.readouterr().err
    assert fleet_main([str(bag), "--out", str(tmp_path / "o"), "--set", "nope=1"]) == EXIT_USAGE
    assert "unknown parameter" in capsys.readouterr().err
    assert fleet_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "--rate-hz" in text and "--image-topic" in text and "--ray-address" in text and "--overwrite" not in text
