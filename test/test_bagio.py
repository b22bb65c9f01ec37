"""Bag reading/writing with real rosbag2 MCAP (and sqlite3) files and real rclpy messages."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import warnings
import zlib
from pathlib import Path

import pytest

pytest.importorskip("rclpy")
pytestmark = pytest.mark.ros

from builtin_interfaces.msg import Time  # noqa: E402
from geometry_msgs.msg import PoseStamped  # noqa: E402
from nav_msgs.msg import Path as PathMsg  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402
from rosbags.interfaces import QosDurability, QosReliability  # noqa: E402
from rosbags.rosbag2 import Reader as RosbagsReader  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from visualization_msgs.msg import Marker  # noqa: E402

from wam_diff2_ros.bag import (  # noqa: E402
    BagNotFoundError,
    BagReader,
    BagReadError,
    BagWarning,
    BagWriteError,
    BagWriter,
    MessageDefinitionError,
    message_class,
    msgtype_of,
    register_msg_dir,
    stamp_to_ns,
)

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
REPO_MSG_DIR = Path(__file__).resolve().parents[1] / "msg"

CUSTOM_MSG = """# a test message
int32 MODE_A=1
std_msgs/Header header
float64[] values
float32[3] triple
string label
Item[] items
"""
CUSTOM_ITEM = "string name\nuint8 kind\n"


def make_path(k: int) -> PathMsg:
    path = PathMsg()
    path.header.frame_id = "base_link"
    path.header.stamp = Time(sec=1_700_000_000 + k, nanosec=250_000_000)
    for i in range(8):
        pose = PoseStamped()
        pose.header = path.header
        pose.pose.position.x = 0.5 * i * (k + 1)
        pose.pose.position.y = -0.1 * i
        pose.pose.orientation.w = 1.0
        path.poses.append(pose)
    return path


def make_marker(k: int) -> Marker:
    marker = Marker()
    marker.header.frame_id = "base_link"
    marker.ns, marker.id, marker.type = "plan", k, Marker.LINE_STRIP
    marker.scale.x = 0.2
    marker.color.r, marker.color.a = 1.0, 1.0
    marker.lifetime.nanosec = 200_000_000
    marker.text = f"marker {k}"
    return marker


@pytest.fixture(scope="module")
def custom_typestore(tmp_path_factory):
    folder = tmp_path_factory.mktemp("msgs") / "msg"
    folder.mkdir()
    (folder / "Sample.msg").write_text(CUSTOM_MSG)
    (folder / "Item.msg").write_text(CUSTOM_ITEM)
    store = get_typestore(Stores.ROS2_KILTED)
    names = register_msg_dir(folder, "bagio_test_pkg", store)
    assert names == ["bagio_test_pkg/msg/Item", "bagio_test_pkg/msg/Sample"]
    return store


def custom_payload(store, k: int) -> tuple[bytes, object]:
    types = store.types
    header = types["std_msgs/msg/Header"](types["builtin_interfaces/msg/Time"](sec=k, nanosec=7), "base_link")
    import numpy as np

    item = types["bagio_test_pkg/msg/Item"]
    msg = types["bagio_test_pkg/msg/Sample"](
        header,
        np.array([0.5 * k, -1.0]),
        np.array([1.0, 2.0, 3.0], np.float32),
        f"sample {k}",
        [item(f"item{k}", k % 3)],
    )
    return store.serialize_cdr(msg, "bagio_test_pkg/msg/Sample"), msg


@pytest.fixture(scope="module")
def written_bag(tmp_path_factory, custom_typestore):
    """A bag with Path, Marker, String and a custom type, 20 of each, in time order."""
    path = tmp_path_factory.mktemp("bags") / "roundtrip"
    expected = []
    with BagWriter(path, typestore=custom_typestore) as bag:
        bag.add_topic("/plan/path", "nav_msgs/msg/Path")
        bag.add_topic("/plan/markers", Marker, qos="latched")
        bag.add_topic("/text", "std_msgs/String", qos=QoSProfile(depth=3, reliability=ReliabilityPolicy.BEST_EFFORT))
        bag.add_topic("/custom", "bagio_test_pkg/msg/Sample")
        for k in range(20):
            stamp = T0 + k * NS // 10
            for topic, msg in (("/plan/path", make_path(k)), ("/plan/markers", make_marker(k))):
                bag.write(topic, msg, stamp)
                expected.append((topic, stamp, msg))
            bag.write("/text", String(data=f"hello {k}"), stamp + 1)
            expected.append(("/text", stamp + 1, String(data=f"hello {k}")))
            data, _ = custom_payload(custom_typestore, k)
            bag.write("/custom", data, stamp + 2)
    return path, expected


def test_writer_creates_a_rosbag2_folder_with_metadata_and_qos(written_bag):
    path, _ = written_bag
    assert sorted(p.name for p in path.iterdir()) == ["metadata.yaml", "roundtrip.mcap"]
    info = YAML(typ="safe").load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["storage_identifier"] == "mcap" and info["version"] == 9
    assert info["message_count"] == 80
    topics = {t["topic_metadata"]["name"]: t for t in info["topics_with_message_count"]}
    assert topics["/plan/path"]["topic_metadata"]["type"] == "nav_msgs/msg/Path"
    assert all(t["message_count"] == 20 for t in topics.values())
    # The type hashes are the ones the installed rclpy messages were generated with.
    share = Path(sys.prefix) / "share" / "nav_msgs" / "msg" / "Path.json"
    if share.is_file():
        hashes = json.loads(share.read_text())["type_hashes"]
        wanted = next(h["hash_string"] for h in hashes if h["type_name"] == "nav_msgs/msg/Path")
        assert topics["/plan/path"]["topic_metadata"]["type_description_hash"] == wanted


def test_round_trip_gives_equal_rclpy_messages(written_bag):
    path, expected = written_bag
    with BagReader(path) as reader:
        assert reader.topics["/plan/markers"].msgtype == "visualization_msgs/msg/Marker"
        assert reader.topics["/custom"].count == 20
        qos = reader.topics["/plan/markers"].qos[0]
        assert qos.durability == QosDurability.TRANSIENT_LOCAL and qos.depth == 1
        assert reader.topics["/text"].qos[0].reliability == QosReliability.BEST_EFFORT
        with pytest.warns(BagWarning, match="bagio_test_pkg/msg/Sample"):
            got = list(reader.messages())
        assert reader.skipped[("/custom", "bagio_test_pkg/msg/Sample")] == 20
    assert [(m.topic, m.stamp_ns) for m in got] == [(t, s) for t, s, _ in expected]
    for message, (_, _, original) in zip(got, expected, strict=True):
        assert type(message.msg) is type(original)
        assert message.msg == original
    assert got[0].msg.poses[3].pose.position.x == pytest.approx(1.5)


def test_custom_type_is_written_with_its_definition_and_reads_raw(written_bag, custom_typestore):
    path, _ = written_bag
    with RosbagsReader(path) as reader:
        conn = next(c for c in reader.connections if c.topic == "/custom")
        assert "Item[] items" in conn.msgdef.data and "MSG: bagio_test_pkg/Item" in conn.msgdef.data
        assert conn.digest == custom_typestore.hash_rihs01("bagio_test_pkg/msg/Sample")
    with BagReader(path) as reader:
        raw = list(reader.raw_messages(["/custom"]))
    assert len(raw) == 20
    for k, (topic, msgtype, _stamp, data) in enumerate(raw):
        assert (topic, msgtype) == ("/custom", "bagio_test_pkg/msg/Sample")
        decoded = custom_typestore.deserialize_cdr(data, msgtype)
        _, original = custom_payload(custom_typestore, k)
        assert decoded.label == original.label and decoded.items[0].name == f"item{k}"
        assert decoded.values.tolist() == original.values.tolist()


def test_package_messages_round_trip_when_generated(tmp_path):
    if not REPO_MSG_DIR.is_dir() or not list(REPO_MSG_DIR.glob("*.msg")):
        pytest.skip("the package's msg/ folder is not there")
    store = get_typestore(Stores.ROS2_KILTED)
    names = register_msg_dir(REPO_MSG_DIR, "wam_diff2_ros", store)
    assert "wam_diff2_ros/msg/PlannedTrajectory" in names
    cls = message_class("wam_diff2_ros/msg/PlannedTrajectory")
    if cls is None:
        pytest.skip("wam_diff2_ros.msg is not generated in this environment")
    plan = cls()
    plan.header.frame_id = "base_link"
    plan.valid = True
    plan.navigation_command = "left"
    with BagWriter(tmp_path / "own", typestore=store) as bag:
        bag.add_topic("/plan", cls)
        bag.write("/plan", plan, T0)
    with BagReader(tmp_path / "own") as reader:
        (got,) = list(reader.messages())
    assert got.msg == plan
    # Where the build installed type descriptions, the bag's hash must be the generated one.
    for prefix in {
        Path(sys.prefix),
        *[Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p],
    }:
        description = prefix / "share" / "wam_diff2_ros" / "msg" / "PlannedTrajectory.json"
        if description.is_file():
            hashes = json.loads(description.read_text())["type_hashes"]
            wanted = next(h["hash_string"] for h in hashes if h["type_name"] == "wam_diff2_ros/msg/PlannedTrajectory")
            assert store.hash_rihs01("wam_diff2_ros/msg/PlannedTrajectory") == wanted


def test_writer_finds_package_definitions_without_registration(tmp_path):
    if not (REPO_MSG_DIR / "PlannedTrajectory.msg").is_file():
        pytest.skip("the package's msg/ folder is not there")
    store = get_typestore(Stores.ROS2_KILTED)
    with BagWriter(tmp_path / "auto", typestore=store) as bag:
        bag.add_topic("/plan", "wam_diff2_ros/msg/PlannedTrajectory")
    assert "wam_diff2_ros/msg/TrajectoryPoint" in store.fielddefs


def test_reads_the_storage_file_metadata_path_and_a_folder_without_metadata(written_bag, tmp_path):
    path, expected = written_bag
    for target in (path / "roundtrip.mcap", path / "metadata.yaml"):
        with BagReader(target) as reader, warnings.catch_warnings():
            warnings.simplefilter("ignore", BagWarning)
            assert sum(1 for _ in reader.messages()) == 60
    copy = tmp_path / "no_metadata"
    shutil.copytree(path, copy)
    (copy / "metadata.yaml").unlink()
    with BagReader(copy) as reader:
        assert reader.topics["/text"].count == 20
        got = list(reader.messages(["/text", "/plan/path"]))
    assert [m.topic for m in got] == [t for t, _, _ in expected if t in ("/text", "/plan/path")]


def test_topic_filter_and_unknown_topics(written_bag):
    path, _ = written_bag
    with BagReader(path) as reader:
        texts = list(reader.messages("/text"))
        assert [m.msg.data for m in texts] == [f"hello {k}" for k in range(20)]
        with pytest.raises(BagReadError, match="not in"):
            list(reader.messages(["/text", "/nope"]))
        assert len(list(reader.messages(["/text", "/nope"], missing_ok=True))) == 20


def test_truncated_mcap_yields_a_prefix_then_raises(tmp_path):
    # Make the bag big enough for several MCAP chunks (1 MB each) so that half of it holds data.
    big = tmp_path / "big"
    payload = "x" * 20_000
    with BagWriter(big) as bag:
        bag.add_topic("/text", String)
        bag.add_topic("/path", PathMsg)
        for k in range(300):
            bag.write("/text", String(data=f"{k}:{payload}"), T0 + k * NS // 100)
            bag.write("/path", make_path(k), T0 + k * NS // 100 + 1)
    with BagReader(big) as reader:
        full = [(m.topic, m.stamp_ns, m.msg) for m in reader.messages()]
    cut = tmp_path / "cut"
    shutil.copytree(big, cut)
    mcap = cut / "big.mcap"
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 2])
    reader = BagReader(cut)
    assert reader.damaged and "big.mcap" in reader.damaged
    got = []
    with pytest.raises(BagReadError) as err:
        for m in reader.messages():
            got.append((m.topic, m.stamp_ns, m.msg))
    assert 0 < len(got) < len(full)
    assert got == full[: len(got)]
    assert len(got) > 0.4 * len(full)  # the part of the cut chunk that is there is read too
    text = str(err.value)
    assert "big.mcap" in text and "byte" in text and f"{len(got)} message(s) read" in text


def _record(opcode: int, body: bytes) -> bytes:
    return bytes([opcode]) + struct.pack("<Q", len(body)) + body


def _mcap_str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<I", len(raw)) + raw


def test_unchunked_mcap_without_summary_is_recovered(tmp_path):
    """Messages written as top-level records (no chunks), the file cut mid-record."""
    schema = _record(0x03, struct.pack("<H", 1) + _mcap_str("std_msgs/msg/String") + _mcap_str("ros2msg")
                     + _mcap_str("string data"))  # fmt: skip
    channel = _record(0x04, struct.pack("<HH", 7, 1) + _mcap_str("/chatter") + _mcap_str("cdr")
                      + struct.pack("<I", 0))  # fmt: skip
    body = b"\x89MCAP0\r\n" + _record(0x01, _mcap_str("ros2") + _mcap_str("handmade")) + schema + channel
    for k in (2, 0, 1):  # out of order in the file: read back in time order
        payload = serialize_message(String(data=f"msg {k}"))
        body += _record(0x05, struct.pack("<HIQQ", 7, k, T0 + k, T0 + k) + payload)
    body += _record(0x05, struct.pack("<HIQQ", 7, 9, T0 + 9, T0 + 9) + b"\x00" * 40)[:20]  # cut short
    path = tmp_path / "handmade.mcap"
    path.write_bytes(body)
    with BagReader(path) as reader:
        assert reader.topics["/chatter"].count == 3
        got = []
        with pytest.raises(BagReadError, match="truncated record"):
            for m in reader.messages():
                got.append(m)
    assert [m.msg.data for m in got] == ["msg 0", "msg 1", "msg 2"]
    assert [m.stamp_ns for m in got] == [T0, T0 + 1, T0 + 2]


def test_corrupt_payload_is_skipped_and_reported_after_the_rest(tmp_path):
    good = serialize_message(String(data="fine"))
    with BagWriter(tmp_path / "bad") as bag:
        bag.add_topic("/text", String)
        bag.write("/text", good, T0)
        bag.write("/text", b"\x00\x01", T0 + 1)  # not a valid CDR String
        bag.write("/text", good, T0 + 2)
    with BagReader(tmp_path / "bad") as reader:
        got = []
        with pytest.raises(BagReadError, match="did not deserialise"):
            for m in reader.messages():
                got.append(m)
        assert [m.stamp_ns for m in got] == [T0, T0 + 2]
        assert reader.decode_errors == 1


def test_sqlite3_bags_are_read_too(tmp_path):
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = get_typestore(Stores.ROS2_KILTED)
    with Writer(tmp_path / "db", version=9, storage_plugin=StoragePlugin.SQLITE3) as writer:
        conn = writer.add_connection("/text", "std_msgs/msg/String", typestore=store)
        for k in range(5):
            writer.write(conn, T0 + k, serialize_message(String(data=str(k))))
    for target in (tmp_path / "db", next((tmp_path / "db").glob("*.db3"))):
        with BagReader(target) as reader:
            assert [m.msg.data for m in reader.messages()] == ["0", "1", "2", "3", "4"]


def test_missing_and_non_bag_paths_fail_clearly(tmp_path):
    with pytest.raises(BagNotFoundError, match="does not exist"):
        BagReader(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BagReadError, match="not a rosbag2 folder"):
        BagReader(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(BagReadError, match="not a bag"):
        BagReader(tmp_path / "notes.txt")
    (tmp_path / "fake.mcap").write_bytes(b"definitely not mcap")
    with pytest.raises(BagReadError, match="not an MCAP"):
        BagReader(tmp_path / "fake.mcap")


def test_writer_rejects_bad_input(tmp_path):
    with BagWriter(tmp_path / "w") as bag:
        with pytest.raises(BagWriteError, match="add_topic"):
            bag.write("/text", String(), T0)
        bag.add_topic("/text", String)
        bag.add_topic("/text", "std_msgs/msg/String")  # same again: fine
        with pytest.raises(BagWriteError, match="already added"):
            bag.add_topic("/text", Marker)
        with pytest.raises(BagWriteError, match="has type std_msgs/msg/String"):
            bag.write("/text", Marker(), T0)
        with pytest.raises(BagWriteError, match="non-negative int"):
            bag.write("/text", String(), -5)
        with pytest.raises(BagWriteError, match="absolute"):
            bag.add_topic("text", String)
        with pytest.raises(MessageDefinitionError, match="no message definition"):
            bag.add_topic("/x", "nonexistent_pkg/msg/Thing")
        with pytest.raises(BagWriteError, match="QoS preset"):
            bag.add_topic("/y", String, qos="fast")
        bag.write("/text", String(data="kept"), T0)
    with pytest.raises(BagWriteError, match="exists already"):
        BagWriter(tmp_path / "w")
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("...")
    with pytest.raises(BagWriteError, match="not a bag folder"):
        BagWriter(tmp_path / "precious", overwrite=True)
    with BagWriter(tmp_path / "w", overwrite=True) as bag:
        bag.add_topic("/text", String)
    assert BagReader(tmp_path / "w").message_count == 0


def test_writer_closes_the_bag_when_the_block_raises(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), BagWriter(tmp_path / "crash") as bag:
        bag.add_topic("/text", String)
        for k in range(3):
            bag.write("/text", String(data=str(k)), T0 + k)
        raise RuntimeError("boom")
    assert (tmp_path / "crash" / "metadata.yaml").is_file()
    with BagReader(tmp_path / "crash") as reader:
        assert [m.msg.data for m in reader.messages()] == ["0", "1", "2"]
        assert reader.damaged is None


def test_register_msg_dir_errors(tmp_path, custom_typestore):
    with pytest.raises(MessageDefinitionError, match="does not exist"):
        register_msg_dir(tmp_path / "nothing", "pkg")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MessageDefinitionError, match=r"no \.msg files"):
        register_msg_dir(tmp_path / "empty", "pkg")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "Bad.msg").write_text("float64[ x\n")
    with pytest.raises(MessageDefinitionError, match=r"Bad\.msg"):
        register_msg_dir(tmp_path / "broken", "pkg", get_typestore(Stores.ROS2_KILTED))
    (tmp_path / "typo").mkdir()
    (tmp_path / "typo" / "Typo.msg").write_text("std_msgs/Headr header\n")
    with pytest.raises(MessageDefinitionError, match="std_msgs/msg/Headr"):
        register_msg_dir(tmp_path / "typo", "pkg", get_typestore(Stores.ROS2_KILTED))
    (tmp_path / "conflict").mkdir()
    (tmp_path / "conflict" / "Item.msg").write_text("int64 other\n")
    with pytest.raises(MessageDefinitionError, match="different definition"):
        register_msg_dir(tmp_path / "conflict", "bagio_test_pkg", custom_typestore)


def test_type_name_helpers():
    assert msgtype_of(Marker) == "visualization_msgs/msg/Marker"
    assert msgtype_of(String(data="x")) == "std_msgs/msg/String"
    assert message_class("std_msgs/String") is String
    assert message_class("no_such_pkg/msg/X") is None
    assert stamp_to_ns(Time(sec=3, nanosec=5)) == 3 * NS + 5
    with pytest.raises(TypeError):
        msgtype_of(dict)


# --- a damaged summary -----------------------------------------------------------------------------------------


def _summary_records(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """The summary's start, the footer's offset and each summary record's ``(opcode, offset, length)``."""
    footer = len(data) - 8 - 29
    start = struct.unpack_from("<Q", data, footer + 9)[0]
    records, pos = [], start
    while pos < footer:
        opcode, length = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        records.append((opcode, pos, length))
        pos += 9 + length
    return start, footer, records


def _flip(data: bytearray, start: int, end: int) -> None:
    for i in range(start, end):
        data[i] ^= 0xFF


def _damage(kind: str, data: bytearray) -> None:
    start, footer, records = _summary_records(bytes(data))
    if kind == "every summary byte":
        _flip(data, start, footer)
    elif kind == "channel opcodes":  # rosbags would skip them: no topic
        for opcode, at, _ in records:
            if opcode == 0x04:
                _flip(data, at, at + 1)
    elif kind == "chunk index offset":  # rosbags would read nothing, or the wrong bytes
        at = next(at for opcode, at, _ in records if opcode == 0x08)
        struct.pack_into("<Q", data, at + 9 + 16, struct.unpack_from("<Q", data, at + 9 + 16)[0] + 1)
    elif kind == "statistics":  # a valid record, counting one channel less
        at = next(at for opcode, at, _ in records if opcode == 0x0B)
        struct.pack_into("<I", data, at + 9 + 10, struct.unpack_from("<I", data, at + 9 + 10)[0] - 1)
    elif kind == "footer":
        _flip(data, footer + 9, footer + 17)
    elif kind == "channel text, with a checksum":  # structurally valid: only the summary CRC can tell
        at = next(at for opcode, at, _ in records if opcode == 0x04)
        crc = zlib.crc32(bytes(data[footer : footer + 25]), zlib.crc32(bytes(data[start:footer])))
        struct.pack_into("<I", data, footer + 25, crc)  # the checksum of the intact summary, as rosbag2 writes it
        _flip(data, at + 9 + 8, at + 9 + 10)  # then the topic name's first bytes


@pytest.fixture(scope="module")
def sample_drive(tmp_path_factory):
    """The synthetic sample drive (the project's own writer) and every message in it, read normally."""
    from wam_diff2_ros.sim import make_sample_bag

    bag = make_sample_bag(tmp_path_factory.mktemp("drive") / "drive", seconds=2.0, width=160, height=96).path
    with BagReader(bag) as reader:
        assert reader.damaged is None
        topics = {name: info.msgtype for name, info in reader.topics.items()}
        return bag, topics, list(reader.raw_messages())


@pytest.mark.parametrize(
    "kind",
    ["every summary byte", "channel opcodes", "chunk index offset", "statistics", "footer",
     "channel text, with a checksum"],
)  # fmt: skip
@pytest.mark.parametrize("open_as", ["folder", "mcap file"])
def test_damaged_summary_is_reported_and_the_chunks_salvaged(sample_drive, tmp_path, kind, open_as):
    bag, topics, clean = sample_drive
    copy = tmp_path / "drive"
    shutil.copytree(bag, copy)
    mcap = next(copy.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    _damage(kind, data)
    mcap.write_bytes(bytes(data))
    with BagReader(copy if open_as == "folder" else mcap) as reader:
        assert reader.damaged and "summary" in reader.damaged and mcap.name in reader.damaged
        assert {name: info.msgtype for name, info in reader.topics.items()} == topics
        got = []
        with pytest.raises(BagReadError, match="damaged summary") as err:
            for message in reader.raw_messages():
                got.append(message)
    assert sorted(got, key=lambda m: (m[2], m[0])) == sorted(clean, key=lambda m: (m[2], m[0]))  # every message
    assert "is damaged" in str(err.value)


def test_summary_check_accepts_intact_files(sample_drive, tmp_path):
    from wam_diff2_ros.bag.salvage import summary_problem

    bag, _, _ = sample_drive
    data = bytearray(next(bag.glob("*.mcap")).read_bytes())
    assert summary_problem(next(bag.glob("*.mcap"))) is None
    start, footer, _ = _summary_records(bytes(data))
    struct.pack_into(
        "<I", data, footer + 25, zlib.crc32(bytes(data[footer : footer + 25]), zlib.crc32(bytes(data[start:footer])))
    )
    (tmp_path / "with_crc.mcap").write_bytes(bytes(data))
    assert summary_problem(tmp_path / "with_crc.mcap") is None  # a correct checksum passes
