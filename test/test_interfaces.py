"""The package's own ROS 2 interfaces: generated modules, contents, serialisation, DDS between processes.

Needs the interfaces built (``wam-diff2-build-interfaces`` on the pip route, colcon otherwise); the
module fails with instructions when they are missing and skips only when rclpy itself is missing.
Also covers the pieces of the build layout that can be checked without building: the path hook
(``wam_diff2_ros/_interfaces.py``), the build tool's CMake rewrite, and CMakeLists/setup.py agreement.
"""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wam_diff2_ros
from wam_diff2_ros import _interfaces
from wam_diff2_ros.core.prompts import COMMAND_ORDER
from wam_diff2_ros.interfaces import build as tool

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_HINT = (
    "wam_diff2_ros.msg is missing: build the interfaces first "
    "(`wam-diff2-build-interfaces` in the venv, or `colcon build` on a ROS 2 install)"
)

rclpy = pytest.importorskip("rclpy", reason="rclpy is not importable (install the PyPI ROS 2 wheels)")
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

_interfaces.extend_package_path(wam_diff2_ros.__path__)  # no-op once __init__ does it
try:
    from wam_diff2_ros import msg as wmsg
except ImportError as exc:
    wmsg = None
    _IMPORT_ERROR = f"{BUILD_HINT} ({exc})"


@pytest.fixture(scope="module")
def interfaces() -> object:
    """The generated ``wam_diff2_ros.msg`` module; a clear failure (not a skip) when it is missing."""
    if wmsg is None:
        pytest.fail(_IMPORT_ERROR, pytrace=False)
    return wmsg


FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)


# --- generated modules and their contents -----------------------------------------------------------


def test_all_messages_are_generated(interfaces) -> None:
    names = {p.stem for p in (REPO_ROOT / "msg").glob("*.msg")}
    expected = {
        "DrivingCommand",
        "TrajectoryPoint",
        "InferenceTiming",
        "PlannedTrajectory",
        "PlanCandidate",
        "Detection",
    }
    assert names == expected | {"DetectionArray"}
    for name in names:
        assert getattr(wmsg, name).__module__.startswith("wam_diff2_ros.msg")


def test_driving_command_constants_follow_navsim_order(interfaces) -> None:
    for index, command in enumerate(COMMAND_ORDER):
        assert getattr(wmsg.DrivingCommand, command.value.upper()) == index
    assert wmsg.DrivingCommand().command == wmsg.DrivingCommand.LEFT  # default 0


def test_planned_trajectory_fields(interfaces) -> None:
    assert wmsg.PlannedTrajectory.get_fields_and_field_types() == {
        "header": "std_msgs/Header",
        "points": "sequence<wam_diff2_ros/TrajectoryPoint>",
        "valid": "boolean",
        "invalid_reason": "string",
        "raw_text": "string",
        "prompt": "string",
        "navigation_command": "string",
        "ego_velocity": "geometry_msgs/Vector3",
        "ego_acceleration": "geometry_msgs/Vector3",
        "timing": "wam_diff2_ros/InferenceTiming",
        "denoising_steps_per_block": "sequence<uint16>",
        "waypoint_confidence": "sequence<float>",
        "confidence": "float",
        "deadline_ms": "float",
        "deadline_met": "boolean",
        "early_tokens": "uint16",
        "model": "string",
        "candidates": "sequence<wam_diff2_ros/PlanCandidate>",
        "chosen_candidate": "int16",
    }
    assert wmsg.PlanCandidate.get_fields_and_field_types() == {
        "index": "uint8",
        "temperature": "float",
        "points": "sequence<wam_diff2_ros/TrajectoryPoint>",
        "valid": "boolean",
        "invalid_reason": "string",
        "score": "float",
        "raw_text": "string",
    }
    assert wmsg.TrajectoryPoint.get_fields_and_field_types() == {
        "time_from_start": "builtin_interfaces/Duration",
        "pose": "geometry_msgs/Pose",
        "longitudinal_velocity_mps": "float",
    }
    timing = wmsg.InferenceTiming.get_fields_and_field_types()
    assert list(timing) == [
        "preprocess_ms",
        "vision_ms",
        "prefill_ms",
        "denoise_ms",
        "commit_ms",
        "total_ms",
        "end_to_end_ms",
    ]
    assert set(timing.values()) == {"float"}


def test_detection_fields(interfaces) -> None:
    assert wmsg.Detection.get_fields_and_field_types() == {
        "label": "string",
        "has_score": "boolean",
        "score": "float",
        "x_min": "float",
        "y_min": "float",
        "x_max": "float",
        "y_max": "float",
        "camera": "string",
    }
    assert wmsg.DetectionArray.get_fields_and_field_types() == {
        "header": "std_msgs/Header",
        "camera": "string",
        "image_width": "uint32",
        "image_height": "uint32",
        "detections": "sequence<wam_diff2_ros/Detection>",
        "skipped_entries": "uint32",
        "raw_text": "string",
        "timing": "wam_diff2_ros/InferenceTiming",
    }


# --- serialisation ------------------------------------------------------------------------------------


@st.composite
def planned_trajectories(draw: st.DrawFn) -> object:
    from builtin_interfaces.msg import Duration
    from geometry_msgs.msg import Point, Pose, Quaternion, Vector3

    points = []
    for i in range(draw(st.integers(0, 10))):
        yaw = draw(st.floats(-math.pi, math.pi))
        points.append(
            wmsg.TrajectoryPoint(
                time_from_start=Duration(sec=i // 2, nanosec=(i % 2) * 500_000_000),
                pose=Pose(
                    position=Point(x=draw(FLOAT32), y=draw(FLOAT32), z=0.0),
                    orientation=Quaternion(z=math.sin(yaw / 2), w=math.cos(yaw / 2)),
                ),
                longitudinal_velocity_mps=draw(FLOAT32),
            )
        )
    msg = wmsg.PlannedTrajectory(
        points=points,
        valid=draw(st.booleans()),
        invalid_reason=draw(TEXT),
        raw_text=draw(TEXT),
        prompt=draw(TEXT),
        navigation_command=draw(st.sampled_from([c.value for c in COMMAND_ORDER])),
        ego_velocity=Vector3(x=draw(FLOAT32), y=draw(FLOAT32)),
        ego_acceleration=Vector3(x=draw(FLOAT32), y=draw(FLOAT32)),
        timing=wmsg.InferenceTiming(total_ms=draw(FLOAT32), end_to_end_ms=draw(FLOAT32)),
        denoising_steps_per_block=draw(st.lists(st.integers(0, 65535), max_size=8)),
        model=draw(TEXT),
    )
    msg.header.frame_id = "base_link"
    msg.header.stamp.sec = draw(st.integers(0, 2**31 - 1))
    msg.header.stamp.nanosec = draw(st.integers(0, 999_999_999))
    return msg


@st.composite
def detection_arrays(draw: st.DrawFn) -> object:
    detections = [
        wmsg.Detection(
            label=draw(TEXT),
            has_score=draw(st.booleans()),
            score=draw(st.floats(0, 1, width=32)),
            x_min=draw(FLOAT32),
            y_min=draw(FLOAT32),
            x_max=draw(FLOAT32),
            y_max=draw(FLOAT32),
            camera="front",
        )
        for _ in range(draw(st.integers(0, 6)))
    ]
    return wmsg.DetectionArray(
        camera="front",
        image_width=draw(st.integers(0, 2**32 - 1)),
        image_height=draw(st.integers(0, 2**32 - 1)),
        detections=detections,
        skipped_entries=draw(st.integers(0, 2**32 - 1)),
        raw_text=draw(TEXT),
        timing=wmsg.InferenceTiming(vision_ms=draw(FLOAT32)),
    )


@settings(max_examples=40, deadline=None)
@given(msg=st.one_of(planned_trajectories(), detection_arrays()))
def test_serialisation_round_trip(interfaces, msg: object) -> None:
    data = serialize_message(msg)
    assert isinstance(data, bytes) and len(data) > 0
    assert deserialize_message(data, type(msg)) == msg


def test_deserialising_garbage_fails_cleanly(interfaces) -> None:
    valid = serialize_message(wmsg.PlannedTrajectory(raw_text="x" * 100))
    with pytest.raises(Exception):  # noqa: B017 - rclpy raises its own RCLError types
        deserialize_message(valid[: len(valid) // 3], wmsg.PlannedTrajectory)


# --- between two processes over DDS -------------------------------------------------------------------

PUBLISHER_CODE = textwrap.dedent(
    """
    import sys, time
    import rclpy
    from rclpy.node import Node
    from rclpy.serialization import deserialize_message
    import wam_diff2_ros
    from wam_diff2_ros._interfaces import extend_package_path
    extend_package_path(wam_diff2_ros.__path__)
    from wam_diff2_ros.msg import DetectionArray, PlannedTrajectory

    rclpy.init()
    node = Node("interfaces_test_publisher")
    plan = deserialize_message(open(sys.argv[1], "rb").read(), PlannedTrajectory)
    dets = deserialize_message(open(sys.argv[2], "rb").read(), DetectionArray)
    pub_plan = node.create_publisher(PlannedTrajectory, "/wam_diff2_test/trajectory", 10)
    pub_dets = node.create_publisher(DetectionArray, "/wam_diff2_test/detections", 10)
    deadline = time.monotonic() + 20
    while not (pub_plan.get_subscription_count() and pub_dets.get_subscription_count()):
        if time.monotonic() > deadline:
            sys.exit("no subscriber matched")
        rclpy.spin_once(node, timeout_sec=0.05)
    for _ in range(3):
        pub_plan.publish(plan)
        pub_dets.publish(dets)
        rclpy.spin_once(node, timeout_sec=0.2)
    end = time.monotonic() + 3  # reliable QoS: stay for retransmissions
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.1)
    print("published")
    """
)


def test_messages_pass_between_processes(interfaces, ros, ros_process, tmp_path: Path) -> None:
    from builtin_interfaces.msg import Duration
    from geometry_msgs.msg import Vector3

    plan = wmsg.PlannedTrajectory(
        points=[
            wmsg.TrajectoryPoint(time_from_start=Duration(sec=i // 2, nanosec=(i % 2) * 500_000_000))
            for i in range(1, 9)
        ],
        valid=True,
        raw_text="1.00,0.00,2.00,0.10",
        prompt="Here is a front-view image ... right",
        navigation_command="right",
        ego_velocity=Vector3(x=4.66, y=-0.09),
        ego_acceleration=Vector3(x=0.17, y=-1.53),
        denoising_steps_per_block=[5, 3, 2],
        model="tiny-test",
    )
    plan.header.frame_id = "base_link"
    plan.header.stamp.sec = 1234
    for i, point in enumerate(plan.points):
        point.pose.position.x = 1.5 * (i + 1)
        point.longitudinal_velocity_mps = 3.0
    dets = wmsg.DetectionArray(
        camera="front",
        image_width=1920,
        image_height=1080,
        detections=[wmsg.Detection(label="car", x_min=10.0, y_min=20.0, x_max=300.0, y_max=200.0)],
        skipped_entries=1,
        raw_text='[{"bbox_2d": [5, 18, 156, 185], "label": "car"}]',
    )
    dets.header.frame_id = "camera_front_optical_frame"
    plan_file, dets_file = tmp_path / "plan.cdr", tmp_path / "dets.cdr"
    plan_file.write_bytes(serialize_message(plan))
    dets_file.write_bytes(serialize_message(dets))

    received_dets: list[object] = []
    listener = ros.create_node()
    listener.create_subscription(wmsg.DetectionArray, "/wam_diff2_test/detections", received_dets.append, 10)
    started = []
    plans = ros.wait_for_messages(
        wmsg.PlannedTrajectory,
        "/wam_diff2_test/trajectory",
        3,
        timeout=25,
        trigger=lambda: started.append(
            ros_process([sys.executable, "-c", PUBLISHER_CODE, str(plan_file), str(dets_file)])
        ),
    )
    assert ros.wait_for(lambda: len(received_dets) >= 3, timeout=10)
    process = started[0]
    assert process.wait(timeout=30) == 0, process.output()
    assert len(plans) == 3, process.output()
    assert all(p == plan for p in plans)
    assert all(d == dets for d in received_dets)
    assert "XMLPARSER" not in process.output()  # the Fast DDS profile loads without errors


# --- the package finds the interfaces on its own --------------------------------------------------------


def _fresh_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=600, check=False
    )


def test_plain_import_finds_built_interfaces(tmp_path: Path) -> None:
    """`import wam_diff2_ros.msg` in a fresh interpreter, without calling the hook by hand."""
    result = _fresh_python("from wam_diff2_ros.msg import PlannedTrajectory; print('ok')", tmp_path)
    assert result.returncode == 0 and "ok" in result.stdout, (
        "wam_diff2_ros/__init__.py must call _interfaces.extend_package_path(__path__):\n" + result.stderr
    )


def test_package_imports_without_interfaces(tmp_path: Path) -> None:
    """Without generated interfaces in any prefix the package still imports; only `.msg` is absent."""
    code = textwrap.dedent(
        """
        import os, sys, importlib.util
        sys.prefix = os.devnull
        os.environ.pop("AMENT_PREFIX_PATH", None)
        os.environ.pop("WAM_DIFF2_ROS_INTERFACES_PREFIX", None)
        import wam_diff2_ros
        from wam_diff2_ros import _interfaces
        assert _interfaces.find_generated_package_dir() is None
        merged = any(os.path.isdir(os.path.join(p, "msg")) for p in wam_diff2_ros.__path__)  # colcon
        assert merged or importlib.util.find_spec("wam_diff2_ros.msg") is None
        print(wam_diff2_ros.__version__)
        """
    )
    result = _fresh_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == wam_diff2_ros.__version__


# --- the path hook, on fake prefixes ------------------------------------------------------------------


def _fake_generated_dir(prefix: Path, with_typesupport: bool = True) -> Path:
    package_dir = prefix / _interfaces.INTERFACES_PYTHON_DIR / "wam_diff2_ros"
    (package_dir / "msg").mkdir(parents=True)
    (package_dir / "msg" / "__init__.py").write_text("")
    if with_typesupport:
        (package_dir / "wam_diff2_ros_s__rosidl_typesupport_c.so").write_bytes(b"")
    return package_dir


def test_hook_appends_generated_dir_from_env_prefix(tmp_path: Path, monkeypatch) -> None:
    generated = _fake_generated_dir(tmp_path / "prefix")
    monkeypatch.setenv(_interfaces.PREFIX_ENV, str(tmp_path / "prefix"))
    path = [str(tmp_path / "our_package")]
    assert _interfaces.extend_package_path(path) == generated
    assert path == [str(tmp_path / "our_package"), str(generated)]
    _interfaces.extend_package_path(path)  # idempotent
    assert path.count(str(generated)) == 1


def test_hook_ignores_incomplete_dirs_and_merged_installs(tmp_path: Path, monkeypatch) -> None:
    _fake_generated_dir(tmp_path / "broken", with_typesupport=False)
    monkeypatch.setenv(_interfaces.PREFIX_ENV, str(tmp_path / "broken"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "nothing"))
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    path = [str(tmp_path / "pkg")]
    assert _interfaces.extend_package_path(path) is None
    assert path == [str(tmp_path / "pkg")]

    merged = tmp_path / "colcon" / "wam_diff2_ros"  # colcon: msg/ next to our code
    (merged / "msg").mkdir(parents=True)
    (merged / "msg" / "__init__.py").write_text("")
    _fake_generated_dir(tmp_path / "other")
    monkeypatch.setenv(_interfaces.PREFIX_ENV, str(tmp_path / "other"))
    path = [str(merged)]
    assert _interfaces.extend_package_path(path) == merged
    assert path == [str(merged)]


# --- build tool pieces ----------------------------------------------------------------------------------


def test_cmake_include_rewrite_is_targeted_and_idempotent(tmp_path: Path) -> None:
    python_include = tmp_path / "include" / "python3.11"
    numpy_include = tmp_path / "site" / "numpy" / "_core" / "include"
    kept = tmp_path / "kept"
    for d in (python_include, numpy_include, kept):
        d.mkdir(parents=True)
    text = (
        "set_target_properties(std_msgs::std_msgs__rosidl_generator_py PROPERTIES\n"
        '  INTERFACE_INCLUDE_DIRECTORIES "/opt/python/cp311-cp311/include/python3.11;'
        '/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include"\n)\n'
        f'set_target_properties(x PROPERTIES\n  INTERFACE_INCLUDE_DIRECTORIES "{kept};/gone/elsewhere"\n)\n'
    )
    once = tool.rewrite_cmake_text(text, str(python_include), str(numpy_include))
    assert f'"{python_include};{numpy_include}"' in once
    assert f'"{kept};/gone/elsewhere"' in once  # not a Python/numpy dir: untouched
    assert "/opt/python" not in once
    assert tool.rewrite_cmake_text(once, str(python_include), str(numpy_include)) == once

    share = tmp_path / "prefix" / "share" / "std_msgs" / "cmake"
    share.mkdir(parents=True)
    (share / "export_std_msgs__rosidl_generator_pyExport.cmake").write_text(text)
    changed = tool.fix_exported_include_dirs(tmp_path / "prefix", str(python_include), str(numpy_include))
    assert [p.name for p in changed] == ["export_std_msgs__rosidl_generator_pyExport.cmake"]
    assert tool.fix_exported_include_dirs(tmp_path / "prefix", str(python_include), str(numpy_include)) == []


def test_installed_wheel_cmake_files_point_to_existing_dirs() -> None:
    """After the build step, no exported include dir of the ROS wheels in this venv is dangling."""
    dangling = []
    for cmake_file in Path(sys.prefix).glob("share/*/cmake/*_rosidl_generator_pyExport.cmake"):
        for match in re.finditer(r'INTERFACE_INCLUDE_DIRECTORIES "([^"]*)"', cmake_file.read_text()):
            dangling += [f"{cmake_file.name}: {d}" for d in match.group(1).split(";") if not Path(d).is_dir()]
    assert not dangling, "run wam-diff2-build-interfaces:\n" + "\n".join(dangling)


def test_stage_sources_mirrors_only_the_interface_inputs(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    (stage / "msg").mkdir(parents=True)
    (stage / "msg" / "Removed.msg").write_text("int32 a\n")
    tool.stage_sources(REPO_ROOT, stage)
    staged = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
    expected = sorted(["CMakeLists.txt", "package.xml"] + [f"msg/{p.name}" for p in (REPO_ROOT / "msg").glob("*.msg")])
    assert staged == expected
    mtime = (stage / "package.xml").stat().st_mtime_ns
    tool.stage_sources(REPO_ROOT, stage)
    assert (stage / "package.xml").stat().st_mtime_ns == mtime  # unchanged files are not rewritten


def test_find_source_dir_rejects_other_directories(tmp_path: Path) -> None:
    with pytest.raises(tool.BuildError, match="not a wam_diff2_ros checkout"):
        tool.find_source_dir(tmp_path)
    assert tool.find_source_dir(REPO_ROOT) == REPO_ROOT


def test_cmake_launchers_match_setup_console_scripts() -> None:
    """`ros2 run wam_diff2_ros <name>` offers the same commands as pip's console scripts."""
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    block = re.search(r"set\(WAM_DIFF2_ROS_LAUNCHERS(.*?)\)", cmake, re.S)
    assert block is not None
    launchers = {name: target for name, target in re.findall(r'"([^"=]+)=([^"]+)"', block.group(1))}
    setup_tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    scripts = {}
    for node in ast.walk(setup_tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " = " in node.value:
            name, _, target = node.value.partition(" = ")
            if re.fullmatch(r"[\w.-]+", name) and ":" in target:
                scripts[name] = target
    scripts.pop("wam-diff2-build-interfaces", None)  # pip route only
    assert launchers == scripts


def test_package_xml_is_valid_and_declares_interface_group() -> None:
    catkin_pkg = pytest.importorskip("catkin_pkg.package")
    package = catkin_pkg.parse_package(str(REPO_ROOT / "package.xml"))
    package.validate()
    assert package.name == "wam_diff2_ros"
    assert package.get_build_type() == "ament_cmake"
    assert "rosidl_interface_packages" in [g.name for g in package.member_of_groups]
    run_deps = {d.name for d in package.exec_depends + package.build_export_depends}
    assert {"rclpy", "std_msgs", "geometry_msgs", "builtin_interfaces", "rosidl_default_runtime"} <= run_deps
    assert "python3-opencv" in run_deps and "rviz2" not in run_deps  # RViz only behind the launch argument
    assert "ament_cmake_pytest" in {d.name for d in package.test_depends}
    package.evaluate_conditions({})  # vision_msgs is optional: only with the documented opt-in
    assert "vision_msgs" not in {d.name for d in package.exec_depends if d.evaluated_condition}
    package.evaluate_conditions({"WAM_DIFF2_ROS_VISION_MSGS": "true"})
    assert "vision_msgs" in {d.name for d in package.exec_depends if d.evaluated_condition}
    (maintainer,) = package.maintainers
    assert "example.com" not in maintainer.email and maintainer.name.endswith("maintainers")  # a role


# --- the build tool end to end, into a temporary prefix --------------------------------------------------


@pytest.mark.slow
def test_build_tool_into_temporary_prefix(tmp_path: Path) -> None:
    prefix, build = tmp_path / "prefix", tmp_path / "build"
    tool_cmd = [sys.executable, "-m", "wam_diff2_ros.cli.build_interfaces", "--prefix", str(prefix)]
    result = subprocess.run(
        [*tool_cmd, "--build-dir", str(build), "--source", str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    generated = prefix / "lib" / "wam_diff2_ros_interfaces" / "wam_diff2_ros"
    assert (generated / "msg" / "_planned_trajectory.py").is_file()
    assert not (generated / "__init__.py").exists()  # never a package that could shadow ours
    assert list((prefix / "lib").glob("libwam_diff2_ros__rosidl_typesupport_fastrtps_c.so"))
    assert (prefix / "share" / "wam_diff2_ros" / "msg" / "PlannedTrajectory.msg").is_file()
    assert not (prefix / "lib" / "wam_diff2_ros").exists()  # interfaces only: no launchers

    uninstall = subprocess.run(
        [*tool_cmd, "--build-dir", str(build), "--uninstall"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert uninstall.returncode == 0, uninstall.stderr
    assert not generated.exists()
    assert not list((prefix / "lib").glob("libwam_diff2_ros__*"))


# --- the Fast DDS profile ---------------------------------------------------------------------------------

IMAGE_PUBLISHER_CODE = textwrap.dedent(
    """
    import sys, time
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    frames = int(sys.argv[1])
    rclpy.init()
    node = Node("profile_test_camera")
    pub = node.create_publisher(Image, "/wam_diff2_test/image", qos_profile_sensor_data)
    deadline = time.monotonic() + 20
    while pub.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            sys.exit("no subscriber matched")
        time.sleep(0.05)
    time.sleep(0.5)
    msg = Image(height=1080, width=1920, encoding="rgb8", step=1920 * 3)
    msg.data = bytes(1920 * 1080 * 3)
    start = time.monotonic()
    for i in range(frames):
        msg.header.frame_id = str(i)
        pub.publish(msg)
        time.sleep(max(0.0, start + (i + 1) / 30.0 - time.monotonic()))
    time.sleep(1.0)
    print(f"published {frames} frames in {time.monotonic() - start:.2f} s")
    """
)


def test_fastdds_profile_carries_1080p_at_30hz(ros, ros_process, ros_env) -> None:
    """With config/fastdds_profile.xml, best-effort 1080p rgb8 at 30 Hz arrives essentially lossless.

    (Without a profile, Fast DDS' defaults lose nearly all of these frames; see docs/node.md, "The Fast DDS profile".)
    """
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    assert any(k.endswith("_DEFAULT_PROFILES_FILE") for k in ros_env)
    frames = 90
    received: list[int] = []
    ros.node.create_subscription(
        Image,
        "/wam_diff2_test/image",
        lambda m: received.append(int(m.header.frame_id)) if len(m.data) == 1920 * 1080 * 3 else None,
        qos_profile_sensor_data,
    )
    process = ros_process([sys.executable, "-c", IMAGE_PUBLISHER_CODE, str(frames)])
    assert process.wait(timeout=40) == 0, process.output()
    ros.wait_for(lambda: len(received) >= frames, timeout=3)
    assert "XMLPARSER" not in process.output()
    assert len(received) >= frames - 3, f"received {len(received)}/{frames}: {process.output()}"
