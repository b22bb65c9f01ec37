"""`wam-diff2-infer` on a reference-format eval.json with a real tiny checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import noise_image, tiny_checkpoint
from PIL import Image

from wam_diff2_ros.cli import infer

pytestmark = pytest.mark.core

PLANNING = (
    "Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: right\n"
    "The current position is (0.00,0.00)\nThe current velocity is: (4.66,-0.09) and current accelerate is: "
    "(0.17,-1.53)\nInstruction: Based on the visual motion cues from the image (such as the relative speed of other "
    "vehicles and the changing distance to the intersection) and the provided telemetry, predict the optimal "
    "driving action for the next 4 seconds with 8 new waypoints."
)
FAST = ["--max_new_tokens", "16", "--block_size", "8", "--device", "cpu", "--dtype", "float32", "--no_progress"]


@pytest.fixture
def eval_dir(tmp_path: Path) -> Path:
    images = tmp_path / "data" / "imgs"
    images.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(noise_image(160, 96, seed=i)).save(images / f"{i}.png")
    samples = [
        {"datasource": "Navsim", "id": f"s{i}", "image": [f"imgs/{i}.png"],
         "conversations": [{"from": "human", "value": PLANNING}, {"from": "gpt", "value": "2.26,-0.17"}]}
        for i in range(2)
    ]  # fmt: skip
    samples.append({"id": "missing", "image": "imgs/nope.png", "conversations": [{"from": "human", "value": PLANNING}]})
    samples.append(
        {
            "id": 7,
            "image": ["imgs/0.png", "imgs/2.png"],
            "conversations": [{"from": "human", "value": "Compare <image> with <image>."}],
        }
    )
    samples.append(
        {"id": "text", "conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "hi"}]}
    )
    (tmp_path / "data" / "eval.json").write_text(json.dumps(samples))
    return tmp_path


def run(eval_dir: Path, *extra: str, output: str = "out/pred.json") -> tuple[int, list]:
    code = infer.main(
        ["--model_id", str(tiny_checkpoint()), "--input_file", str(eval_dir / "data" / "eval.json"),
         "--output_file", str(eval_dir / output), *FAST, *extra]
    )  # fmt: skip
    path = eval_dir / output
    return code, json.loads(path.read_text()) if path.exists() else []


def test_predicts_every_sample_and_records_the_failure(eval_dir, monkeypatch, capsys):
    monkeypatch.chdir(eval_dir)  # relative image paths resolve against the eval.json folder, not the cwd
    code, records = run(eval_dir)
    assert code == infer.EXIT_SOME_FAILED  # the run went on past the failing sample, and says so
    assert "wam-diff2-infer: warning: 1 of 5 samples failed" in capsys.readouterr().err
    assert [r["id"] for r in records] == ["s0", "s1", "missing", 7, "text"]
    by_id = {r["id"]: r for r in records}
    assert "image not found" in by_id["missing"]["error"] and by_id["missing"]["prediction"] == ""
    for key in ("s0", "s1", 7, "text"):
        record = by_id[key]
        assert "error" not in record
        assert {
            "id",
            "datasource",
            "image",
            "question",
            "prediction",
            "ground_truth",
            "parsed",
            "timing",
        } <= record.keys()
        assert record["timing"]["total_s"] > 0
    assert by_id["s0"]["datasource"] == "Navsim" and by_id[7]["datasource"] == "navsim"
    assert by_id["s0"]["ground_truth"] == "2.26,-0.17"
    assert by_id["s0"]["question"] == PLANNING
    assert by_id["s0"]["parsed"]["task"] == "planning" and by_id["s0"]["parsed"]["valid"] is False
    assert by_id["s0"]["parsed"]["reason"]
    assert by_id["s0"]["parsed"]["waypoint_confidence"] == [] and by_id["s0"]["parsed"]["confidence"] is None
    assert by_id["text"]["parsed"] == {"task": "vqa", "answer": by_id["text"]["parsed"]["answer"]}
    assert not [p for p in (eval_dir / "out").iterdir() if p.name != "pred.json"]  # no temp files left


def test_resume_keeps_finished_samples_and_retries_failures(eval_dir):
    run(eval_dir)
    path = eval_dir / "out" / "pred.json"
    records = json.loads(path.read_text())
    records[0]["prediction"] = "kept from the first run"
    path.write_text(json.dumps(records))
    (eval_dir / "data" / "imgs" / "nope.png").write_bytes((eval_dir / "data" / "imgs" / "1.png").read_bytes())
    code, refused = run(eval_dir)  # neither --resume nor --overwrite: the earlier output is not touched
    assert code == 2 and refused == records
    code, resumed = run(eval_dir, "--resume")
    assert code == 0  # every sample predicted now
    assert resumed[0]["prediction"] == "kept from the first run"
    assert "error" not in resumed[2] and resumed[2]["parsed"]["task"] == "planning"


def test_seeded_sampling_is_reproducible(eval_dir):
    sampling = ["--temperature", "0.9", "--top_k", "20", "--seed", "5"]
    _, first = run(eval_dir, *sampling, output="a.json")
    _, second = run(eval_dir, *sampling, output="b.json")
    assert [r.get("token_ids") for r in first] == [r.get("token_ids") for r in second]
    _, greedy = run(eval_dir, output="g.json")
    assert [r.get("token_ids") for r in greedy] != [r.get("token_ids") for r in first]


def test_both_engines_give_the_same_predictions(eval_dir):
    _, exact = run(eval_dir, "--engine", "exact", "--batch_size", "2", output="exact.json")
    _, fast = run(eval_dir, "--engine", "fast", "--batch_size", "2", output="fast.json")
    assert sum(bool(r.get("token_ids")) for r in exact) == 4  # every sample with its images decoded
    assert [r.get("token_ids") for r in fast] == [r.get("token_ids") for r in exact]
    assert [r["prediction"] for r in fast] == [r["prediction"] for r in exact]


def test_batches_give_one_record_per_sample(eval_dir):
    code, records = run(eval_dir, "--batch_size", "3", "--padding_side", "right")
    assert code == infer.EXIT_SOME_FAILED and len(records) == 5
    assert sum("error" in r for r in records) == 1


def test_every_sample_failing_exits_1_and_says_so(eval_dir, capsys):
    data = eval_dir / "data"
    samples = json.loads((data / "eval.json").read_text())[:2]
    for sample in samples:
        sample["image"] = ["imgs/gone.png"]
    (data / "all_fail.json").write_text(json.dumps(samples))
    code = infer.main(
        ["--model_id", str(tiny_checkpoint()), "--input_file", str(data / "all_fail.json"),
         "--output_file", str(eval_dir / "fail.json"), *FAST]
    )  # fmt: skip
    assert code == 1
    assert "wam-diff2-infer: error: every sample failed (2 of 2" in capsys.readouterr().err
    records = json.loads((eval_dir / "fail.json").read_text())
    assert [("image not found" in r["error"]) for r in records] == [True, True]  # each failure still recorded


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        infer.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "1 the checkpoint cannot be loaded, or every sample failed" in text and "3 some samples failed" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "input file not found"),
        ("{not json", "is not valid JSON"),
        ('{"id": 1}', "must hold a JSON list"),
        ("[1, 2]", "sample 0 is a int"),
    ],
)
def test_bad_input_file_exits_2_with_one_message(tmp_path, content, message):
    path = tmp_path / "eval.json"
    if content is not None:
        path.write_text(content)
    result = subprocess.run(
        [sys.executable, "-m", "wam_diff2_ros.cli.infer", "--model_id", str(tiny_checkpoint()),
         "--input_file", str(path), "--output_file", str(tmp_path / "o.json")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("wam-diff2-infer: error:")


def test_data_parallel_ranks_merge_in_input_order(eval_dir):
    _, single = run(eval_dir, output="single.json")
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    command = [
        sys.executable, "-m", "wam_diff2_ros.cli.infer", "--model_id", str(tiny_checkpoint()),
        "--input_file", str(eval_dir / "data" / "eval.json"), "--output_file", str(eval_dir / "dp.json"), *FAST,
    ]  # fmt: skip
    ranks = [
        subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stderr=subprocess.PIPE, text=True)
        for r in (1, 0)
    ]
    for rank, process in zip((1, 0), ranks, strict=True):
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == (infer.EXIT_SOME_FAILED if rank == 0 else 0), stderr  # "missing" is rank 0's
    merged = json.loads((eval_dir / "dp.json").read_text())
    assert [r["id"] for r in merged] == [r["id"] for r in single]
    assert [r.get("token_ids") for r in merged] == [r.get("token_ids") for r in single]
    shard0 = json.loads((eval_dir / "dp.json.rank0-of-2.json").read_text())
    assert [r["id"] for r in shard0] == ["s0", "s1", "missing"]  # the first rank takes the extra sample


def test_flags_stay_the_references_and_defaults_come_from_the_core():
    from wam_diff2_ros.core.engine.decoding import REMASKING_STRATEGIES, DecodeConfig
    from wam_diff2_ros.core.image_preprocess import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS

    parser = infer.build_parser()
    flags = {s for action in parser._actions for s in action.option_strings}
    assert flags == {
        "-h", "--help", "--model_id", "--input_file", "--output_file", "--max_new_tokens", "--block_size",
        "--denoising_steps", "--temperature", "--top_k", "--top_p", "--remasking_strategy",
        "--confidence_threshold", "--engine", "--no_cuda_graphs", "--deadline_ms", "--min_pixels",
        "--max_pixels",
        "--device", "--dtype", "--seed", "--resume", "--batch_size", "--padding_side", "--save_every", "--no_progress",
        "--overwrite",
    }  # fmt: skip
    args = parser.parse_args(["--model_id", "m", "--input_file", "i.json", "--output_file", "o.json"])
    d = DecodeConfig()
    steps = (d.max_new_tokens, d.block_size, d.denoising_steps)
    assert (args.max_new_tokens, args.block_size, args.denoising_steps) == steps
    assert (args.temperature, args.top_k, args.top_p, args.confidence_threshold) == (
        d.temperature, d.top_k, d.top_p, d.confidence_threshold,
    )  # fmt: skip
    assert (args.remasking_strategy, args.engine, args.no_cuda_graphs) == (d.remasking_strategy, d.engine, False)
    assert args.deadline_ms == d.deadline_ms
    assert (args.min_pixels, args.max_pixels) == (DEFAULT_MIN_PIXELS, DEFAULT_MAX_PIXELS)
    choices = next(a.choices for a in parser._actions if "--remasking_strategy" in a.option_strings)
    assert tuple(choices) == REMASKING_STRATEGIES


def test_plans_carry_their_confidence(tmp_path):
    from wam_diff2_ros.demo.expand import demo_checkpoint
    from wam_diff2_ros.sim.render import render_frames

    frames = render_frames(seed=0, width=480, height=270, stamps_s=(1.0, 2.0, 3.0))
    samples = []
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(tmp_path / f"{i}.png")
        prompt = PLANNING.replace(": right", ": straight").replace("(4.66,-0.09)", "(6.00,0.00)")
        prompt = prompt.replace("(0.17,-1.53)", "(0.00,0.00)")
        samples.append({"id": i, "image": [f"{i}.png"], "conversations": [{"from": "human", "value": prompt}]})
    (tmp_path / "eval.json").write_text(json.dumps(samples))
    output = tmp_path / "pred.json"
    code = infer.main(
        ["--model_id", str(demo_checkpoint()), "--input_file", str(tmp_path / "eval.json"),
         "--output_file", str(output), "--device", "cpu", "--dtype", "float32", "--no_progress"]
    )  # fmt: skip
    records = json.loads(output.read_text())
    assert code == 0 and len(records) == 3
    for record in records:
        assert len(record["token_confidence"]) == len(record["token_ids"])
        assert all(0.0 < p <= 1.0 for p in record["token_confidence"])
    plans = [r["parsed"] for r in records if r["parsed"]["valid"]]
    assert plans, [r["prediction"] for r in records]
    for plan in plans:
        assert len(plan["waypoint_confidence"]) == len(plan["waypoints"]) == 8
        assert all(0.0 < c <= 1.0 for c in plan["waypoint_confidence"])
        assert plan["confidence"] == min(plan["waypoint_confidence"])
