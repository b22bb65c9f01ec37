"""MCAP checksums with real bags from the package's writer: every chunk, the data section and the summary carry
CRCs; a chunk that fails its CRC is skipped with its time range and the reading goes on; CRC 0 still reads."""

from __future__ import annotations

import random
import shutil
import struct
import zlib
from pathlib import Path

import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from rosbags.rosbag2 import Reader as RosbagsReader  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from wam_diff2_ros.bag import BagReader, BagReadError, BagWriter  # noqa: E402
from wam_diff2_ros.bag.salvage import summary_problem  # noqa: E402

NS = 1_000_000_000
T0 = 1_700_000_000 * NS


def _records(data: bytes) -> list[tuple[int, int, int]]:
    """``(opcode, offset, length)`` of every top-level record up to the footer."""
    out, pos = [], 8
    while pos + 9 <= len(data):
        opcode, length = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        out.append((opcode, pos, length))
        if opcode == 0x02:
            break
        pos += 9 + length
    return out


def _chunk_fields(data: bytes, at: int) -> tuple[int, int, int, int, int]:
    """A chunk record's start and end time, CRC, and where its records (compressed or not) lie."""
    start_ns, end_ns, _, crc, comp_len = struct.unpack_from("<QQQII", data, at + 9)
    records_len = struct.unpack_from("<Q", data, at + 9 + 32 + comp_len)[0]
    return start_ns, end_ns, crc, at + 9 + 40 + comp_len, records_len


@pytest.fixture(scope="module")
def chunked_bag(tmp_path_factory) -> tuple[Path, list[tuple[str, int, str]]]:
    """A bag of ~6 MB of text messages: several 1 MB chunks."""
    bag = tmp_path_factory.mktemp("crc") / "chunked"
    payload = "x" * 20_000
    with BagWriter(bag) as writer:
        writer.add_topic("/text", String)
        for k in range(300):
            writer.write("/text", String(data=f"{k}:{payload}"), T0 + k * NS // 100)
    with BagReader(bag) as reader:
        clean = [(m.topic, m.stamp_ns, m.msg.data) for m in reader.messages()]
    assert len(clean) == 300
    return bag, clean


def test_written_bags_carry_chunk_data_and_summary_crcs(chunked_bag):
    bag, _ = chunked_bag
    data = (bag / "chunked.mcap").read_bytes()
    records = _records(data)
    chunks = [at for opcode, at, _ in records if opcode == 0x06]
    assert len(chunks) >= 4
    for at in chunks:
        assert struct.unpack_from("<I", data, at + 9 + 28)[0] == 0  # uncompressed (the writer's default)
        _, _, crc, start, length = _chunk_fields(data, at)
        assert crc != 0 and crc == zlib.crc32(data[start : start + length])
    data_end = next(at for opcode, at, _ in records if opcode == 0x0F)
    assert struct.unpack_from("<I", data, data_end + 9)[0] == zlib.crc32(data[:data_end])
    footer = len(data) - 8 - 29
    summary_start = struct.unpack_from("<Q", data, footer + 9)[0]
    summary_crc = struct.unpack_from("<I", data, footer + 25)[0]
    assert summary_crc == zlib.crc32(data[footer : footer + 25], zlib.crc32(data[summary_start:footer])) != 0
    assert summary_problem(bag / "chunked.mcap") is None
    with RosbagsReader(bag) as reader:  # rosbags checks the chunk CRCs it finds
        assert sum(1 for _ in reader.messages()) == 300


def test_a_chunk_failing_its_crc_is_skipped_and_the_next_chunks_read(chunked_bag, tmp_path):
    bag, clean = chunked_bag
    copy = tmp_path / "chunked"
    shutil.copytree(bag, copy)
    mcap = copy / "chunked.mcap"
    data = bytearray(mcap.read_bytes())
    chunks = [at for opcode, at, _ in _records(bytes(data)) if opcode == 0x06]
    start_ns, end_ns, _, start, length = _chunk_fields(bytes(data), chunks[1])
    at = start + length // 2
    data[at : at + 64] = random.Random(50).randbytes(64)  # inside the second chunk's records
    mcap.write_bytes(bytes(data))

    for target in (copy, mcap):
        with BagReader(target) as reader:
            time_range = f"{start_ns}..{end_ns} ns"
            assert reader.damaged and "checksum mismatch" in reader.damaged and time_range in reader.damaged
            got = []
            with pytest.raises(BagReadError) as err:
                for m in reader.messages():
                    got.append((m.topic, m.stamp_ns, m.msg.data))
            lost = [m for m in clean if start_ns <= m[1] <= end_ns]
            assert got == [m for m in clean if not start_ns <= m[1] <= end_ns]  # every later chunk is read
            assert 0 < len(lost) < 100 and got[-1] == clean[-1]
            assert [(d.start_ns, d.end_ns, d.messages) for d in reader.skipped_chunks] == [
                (start_ns, end_ns, len(lost))
            ]
            text = str(err.value)
            assert f"1 damaged chunk(s) skipped ({len(lost)} message(s))" in text and time_range in text
            assert f"{len(got)} message(s) read" in text


def test_a_bag_without_crcs_still_reads(chunked_bag, tmp_path):
    """CRC 0 means "not computed" in MCAP (rosbags writes it): nothing is checked, nothing is damaged."""
    bag, clean = chunked_bag
    copy = tmp_path / "chunked"
    shutil.copytree(bag, copy)
    mcap = copy / "chunked.mcap"
    data = bytearray(mcap.read_bytes())
    for opcode, at, _ in _records(bytes(data)):
        if opcode == 0x06:
            struct.pack_into("<I", data, at + 9 + 24, 0)
        elif opcode == 0x0F:
            struct.pack_into("<I", data, at + 9, 0)
    struct.pack_into("<I", data, len(data) - 8 - 4, 0)  # the summary's
    mcap.write_bytes(bytes(data))
    with BagReader(copy) as reader:
        assert reader.damaged is None and reader.skipped_chunks == []
        assert [(m.topic, m.stamp_ns, m.msg.data) for m in reader.messages()] == clean


def test_replay_of_a_bag_with_a_damaged_chunk_warns_skips_it_and_exits_3(tmp_path, capsys):
    """The replay reads past a chunk that fails its CRC: the plans after it are made, the warning names the
    chunk's time range, and metrics.json and the exit code say the bag was damaged."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from core_helpers import tiny_checkpoint

    from wam_diff2_ros.cli.replay import main
    from wam_diff2_ros.replay import EXIT_BAG_DAMAGED
    from wam_diff2_ros.sim import make_sample_bag

    bag = make_sample_bag(tmp_path / "drive", seconds=4.0, width=320, height=180, raw=True).path
    args = ["--model", str(tiny_checkpoint()), "--rate-hz", "2"]
    args += ["--set", "decoding.max_new_tokens=32", "--set", "decoding.denoising_steps=4", "--no-progress"]
    with BagReader(bag) as reader:
        last_ns = max(m.stamp_ns for m in reader.messages())
    mcap = next(bag.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    chunks = [at for opcode, at, _ in _records(bytes(data)) if opcode == 0x06]
    assert len(chunks) >= 5
    start_ns, end_ns, crc, start, length = _chunk_fields(bytes(data), chunks[2])
    assert crc != 0
    at = start + length // 2
    data[at : at + 64] = random.Random(7).randbytes(64)
    mcap.write_bytes(bytes(data))

    out = tmp_path / "damaged"
    assert main([str(bag), "--out", str(out), *args]) == EXIT_BAG_DAMAGED
    err = capsys.readouterr().err
    time_range = f"{start_ns}..{end_ns} ns"
    assert f"warning: {mcap}: chunk " in err and time_range in err  # a zstd chunk: its CRC or its stream fails
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["exit_code"] == EXIT_BAG_DAMAGED and metrics["complete"] is False
    assert "1 damaged chunk(s) skipped (" in metrics["bag_error"] and time_range in metrics["bag_error"]
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert any(r["t_ns"] > end_ns and r["status"] == "planned" for r in records)  # read on after the damage
    assert metrics["run"]["last_message_ns"] == last_ns
