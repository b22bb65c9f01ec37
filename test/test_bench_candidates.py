"""`wam-diff2-bench --candidates N`: a candidate batch against one decode after another, on the tiny model."""

from __future__ import annotations

from wam_diff2_ros.cli.bench import main


def test_candidates_flag_runs_the_batch_and_the_sequential_decodes(capsys) -> None:
    flags = ["--model-id", "tiny", "--width", "64", "--height", "64", "--plans", "1", "--warmup", "0"]
    code = main(["--candidates", "1", "--candidates", "3", *flags, "--steps-per-block", "2", "--blocks", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert set(rows) == {"1", "3"}
    assert rows["1"][3] == "1.00"  # one answer: the batch is the single decode
    assert float(rows["3"][1]) > 0 and float(rows["3"][2]) > 0


def test_candidates_out_of_range_is_refused(capsys) -> None:
    assert main(["--candidates", "17", "--model-id", "tiny"]) == 1
    assert "--candidates must be in [1, 16], got 17" in capsys.readouterr().err
