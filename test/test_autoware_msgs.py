"""The Autoware message packages built here (``interfaces/autoware/``) are upstream's, field for field and hash
for hash.

Upstream: autowarefoundation/autoware_msgs 1.12.0 (commit 7025d8f7: autoware_planning_msgs Trajectory,
TrajectoryPoint; autoware_vehicle_msgs TurnIndicatorsCommand) and autowarefoundation/autoware_internal_msgs
1.12.1 (commit 094122d3: autoware_internal_planning_msgs CandidateTrajectories, CandidateTrajectory,
GeneratorInfo). Upstream installs its ``.json`` type descriptions only with a build, so the expected RIHS01
hashes below were computed from the upstream field lists (recorded in :data:`UPSTREAM`, comments left out: they
do not enter a hash) with rosidl's own generator (``rosidl_adapter`` .msg → .idl, then
``rosidl_generator_type_description.generate_type_hash``, ros-rosidl 4.9.5 wheels), the path this test's fixture
takes again; our definitions must give the same hashes through it and in the build's installed ``.json`` files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("rosidl_generator_type_description", reason="rosidl generators are not installed")
from rosidl_adapter.msg import convert_msg_to_idl
from rosidl_adapter.parser import parse_message_string
from rosidl_generator_type_description import generate_type_hash

from wam_diff2_ros.interfaces.autoware import PACKAGES, SOURCE_DIR

REPO_ROOT = Path(__file__).resolve().parents[1]

#: The upstream definitions' lines (constants and fields), per package and type, in build order.
UPSTREAM: dict[str, dict[str, str]] = {
    "autoware_planning_msgs": {
        "Trajectory": "std_msgs/Header header\nautoware_planning_msgs/TrajectoryPoint[] points\n",
        "TrajectoryPoint": (
            "builtin_interfaces/Duration time_from_start\n"
            "geometry_msgs/Pose pose\n"
            "float32 longitudinal_velocity_mps\n"
            "float32 lateral_velocity_mps\n"
            "float32 acceleration_mps2\n"
            "float32 heading_rate_rps\n"
            "float32 front_wheel_angle_rad\n"
            "float32 rear_wheel_angle_rad\n"
        ),
    },
    "autoware_vehicle_msgs": {
        "TurnIndicatorsCommand": (
            "uint8 NO_COMMAND = 0\nuint8 DISABLE = 1\nuint8 ENABLE_LEFT = 2\nuint8 ENABLE_RIGHT = 3\n"
            "builtin_interfaces/Time stamp\nuint8 command\n"
        ),
    },
    "autoware_internal_planning_msgs": {
        "CandidateTrajectories": (
            "autoware_internal_planning_msgs/CandidateTrajectory[] candidate_trajectories\n"
            "autoware_internal_planning_msgs/GeneratorInfo[] generator_info\n"
        ),
        "CandidateTrajectory": (
            "std_msgs/Header header\n"
            "unique_identifier_msgs/UUID generator_id\n"
            "autoware_planning_msgs/TrajectoryPoint[] points\n"
        ),
        "GeneratorInfo": "unique_identifier_msgs/UUID generator_id\nstd_msgs/String generator_name\n",
    },
}

#: RIHS01 hashes of the upstream definitions (see the module docstring for how they were derived).
EXPECTED_HASHES = {
    "autoware_planning_msgs/msg/Trajectory": "RIHS01_8259168af0abd0d3fa8297048f83aae4dad0955bd2d4e0904bcdc4f6f99a61b2",
    "autoware_planning_msgs/msg/TrajectoryPoint": (
        "RIHS01_7c702c786bee4e719bb38aa03d89ec917c55f7e89369351db51125052f6328c6"
    ),
    "autoware_vehicle_msgs/msg/TurnIndicatorsCommand": (
        "RIHS01_657d7f761a9b02c543e4bf3e0000405906b6169dc0bbfd6637c64fe00d98cec7"
    ),
    "autoware_internal_planning_msgs/msg/CandidateTrajectories": (
        "RIHS01_64c383ed8984651da0da8cc403af88918835869c4e4f028676e3023c6122b29c"
    ),
    "autoware_internal_planning_msgs/msg/CandidateTrajectory": (
        "RIHS01_65c7f26774c9459f94b7b95452c712f460ed20f4a008f972e71cb768b06576ee"
    ),
    "autoware_internal_planning_msgs/msg/GeneratorInfo": (
        "RIHS01_b930bac9138649852a4f9b06a66dd6d83a3639d44d4efdf6c1a5b6ff178cfbc4"
    ),
}


def _fields(package: str, name: str, text: str) -> list[tuple[str, str, str]]:
    """(type, name, constant value or "") of each constant and field, comments dropped."""
    spec = parse_message_string(package, name, text)
    constants = [(str(c.type), c.name, str(c.value)) for c in spec.constants]
    return constants + [(str(f.type), f.name, "") for f in spec.fields]


def type_hashes(definitions: dict[str, dict[str, str]], work: Path) -> dict[str, str]:
    """RIHS01 hash of every type in ``definitions`` (package → type → .msg text, in dependency order), through
    rosidl's generator as a build runs it; other packages' descriptions come from the installed ROS prefix."""
    share = Path(sys.prefix, "share")
    hashes: dict[str, str] = {}
    built: dict[str, Path] = {}
    for package, types in definitions.items():
        package_dir = work / package
        (package_dir / "msg").mkdir(parents=True)
        idl_dir = work / "idl" / package / "msg"
        idl_dir.mkdir(parents=True)
        for name, text in types.items():
            (package_dir / "msg" / f"{name}.msg").write_text(text, encoding="utf-8")
            convert_msg_to_idl(package_dir, package, Path("msg", f"{name}.msg"), idl_dir)
        out = work / "json" / package
        includes = [f"{dep}:{share / dep}" for dep in ("builtin_interfaces", "geometry_msgs", "std_msgs")]
        includes += [f"unique_identifier_msgs:{share / 'unique_identifier_msgs'}"]
        includes += [f"{dep}:{path}" for dep, path in built.items()]
        arguments = {
            "package_name": package,
            "output_dir": str(out),
            "idl_tuples": [f"{work / 'idl' / package}:msg/{name}.idl" for name in types],
            "include_paths": includes,
        }
        args_file = work / f"{package}_args.json"
        args_file.write_text(json.dumps(arguments), encoding="utf-8")
        for path in generate_type_hash(str(args_file)):
            top = json.loads(path.read_text(encoding="utf-8"))["type_hashes"][0]
            hashes[top["type_name"]] = top["hash_string"]
        built[package] = out
    return hashes


def _ours() -> dict[str, dict[str, str]]:
    root = REPO_ROOT / SOURCE_DIR
    return {
        package: {name: (root / package / "msg" / f"{name}.msg").read_text(encoding="utf-8") for name in types}
        for package, types in UPSTREAM.items()
    }


def test_the_packages_hold_exactly_the_recorded_types() -> None:
    assert tuple(UPSTREAM) == PACKAGES
    for package, types in UPSTREAM.items():
        found = sorted(p.stem for p in (REPO_ROOT / SOURCE_DIR / package / "msg").glob("*.msg"))
        assert found == sorted(types), package


def test_field_lists_equal_upstream() -> None:
    ours = _ours()
    for package, types in UPSTREAM.items():
        for name, text in types.items():
            assert _fields(package, name, ours[package][name]) == _fields(package, name, text), f"{package}/{name}"


def test_upstream_definitions_give_the_recorded_hashes(tmp_path: Path) -> None:
    assert type_hashes(UPSTREAM, tmp_path) == EXPECTED_HASHES


def test_our_definitions_give_upstream_hashes(tmp_path: Path) -> None:
    assert type_hashes(_ours(), tmp_path) == EXPECTED_HASHES


def test_a_changed_field_changes_the_hash(tmp_path: Path) -> None:
    changed = {"autoware_planning_msgs": dict(UPSTREAM["autoware_planning_msgs"])}
    changed["autoware_planning_msgs"]["TrajectoryPoint"] = UPSTREAM["autoware_planning_msgs"][
        "TrajectoryPoint"
    ].replace("float32 rear_wheel_angle_rad", "float64 rear_wheel_angle_rad")
    hashes = type_hashes(changed, tmp_path)
    assert (
        hashes["autoware_planning_msgs/msg/TrajectoryPoint"]
        != EXPECTED_HASHES["autoware_planning_msgs/msg/TrajectoryPoint"]
    )


def test_the_installed_packages_carry_upstream_hashes() -> None:
    """The build's own ``.json`` files (where the packages were built into this prefix, or installed by Autoware)."""
    checked = 0
    for type_name, expected in EXPECTED_HASHES.items():
        package, _, name = type_name.split("/")
        path = Path(sys.prefix, "share", package, "msg", f"{name}.json")
        if not path.is_file():
            continue
        hashes = {h["type_name"]: h["hash_string"] for h in json.loads(path.read_text())["type_hashes"]}
        assert hashes[type_name] == expected
        checked += 1
    if checked == 0:
        pytest.skip("the Autoware message packages are not installed in this prefix")
