"""launch/wam_diff2.launch.py.

``launch`` / ``launch_ros`` are not installable here (PyPI's ``launch`` is an unrelated package), so the
launch file is loaded with small stand-ins for the names it imports, injected into ``sys.modules`` for these
tests only. Each stand-in binds its arguments to the documented signature of the real class (the keyword
sets below, read from the public ros2/launch and ros2/launch_ros sources), so a misspelt keyword or a
missing required one fails here as it would under ``ros2 launch``. What is checked: the declared arguments,
the actions ``launch_setup`` builds for given arguments (node, parameters, remaps, RViz behind its
``IfCondition``, ``sigterm_timeout``, Fast DDS variable) and, for real, that the node started
with the command line ``launch_ros`` would build from that Node action (executable, ``--ros-args``, name,
namespace, the package YAML, the overrides as a parameter file, the remaps) comes up active over DDS with
the YAML's parameters and the remapped topics. Not run: ``ros2 launch`` itself (launch's event loop,
``launch_ros``'s own command-line assembly, RViz).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILE = REPO_ROOT / "launch" / "wam_diff2.launch.py"


# Constructor signatures of the launch / launch_ros classes the launch file uses: (positional parameters,
# keyword-only parameters, required keywords). From the public sources, rolling branches:
# ros2/launch 02595baf (2024-12-20): launch/action.py Action.__init__ (condition), actions/execute_local.py
# ExecuteLocal.__init__, actions/execute_process.py ExecuteProcess.__init__ (its **kwargs go to ExecuteLocal,
# whose **kwargs go to Action), actions/declare_launch_argument.py, actions/set_environment_variable.py,
# actions/opaque_function.py (their **kwargs go to Action), conditions/if_condition.py,
# substitutions/launch_configuration.py, launch_description.py;
# ros2/launch_ros f9ab937 (2024-11-26): launch_ros/actions/node.py Node.__init__ (its **kwargs go to
# ExecuteProcess; Node builds cmd itself).
ACTION = ("condition",)
EXECUTE_LOCAL = (
    "shell", "sigterm_timeout", "sigkill_timeout", "emulate_tty", "output", "output_format", "cached_output",
    "log_cmd", "on_exit", "respawn", "respawn_delay", "respawn_max_retries",
)  # fmt: skip
EXECUTE_PROCESS = ("prefix", "name", "cwd", "env", "additional_env")
NODE = ("executable", "package", "name", "namespace", "exec_name", "parameters", "remappings", "ros_arguments",
        "arguments")  # fmt: skip
SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "LaunchDescription": (("initial_entities",), ("deprecated_reason",), ()),
    "DeclareLaunchArgument": (("name",), ("default_value", "description", "choices", *ACTION), ()),
    "SetEnvironmentVariable": (("name", "value"), ACTION, ()),
    "OpaqueFunction": ((), ("function", "args", "kwargs", *ACTION), ("function",)),
    "IfCondition": (("predicate_expression",), (), ()),
    "LaunchConfiguration": (("variable_name",), ("default",), ()),
    "Node": ((), tuple(dict.fromkeys((*NODE, *EXECUTE_PROCESS, *EXECUTE_LOCAL, *ACTION))), ("executable",)),
}


def signature(class_name: str) -> inspect.Signature:
    """The documented constructor signature of a launch class (see :data:`SIGNATURES`)."""
    positional, keywords, required = SIGNATURES[class_name]
    first = [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None if index else inspect._empty)
        for index, name in enumerate(positional)
    ]
    if class_name == "LaunchDescription":
        first = [inspect.Parameter("initial_entities", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    rest = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=inspect._empty if name in required else None)
        for name in keywords
    ]
    return inspect.Signature(first + rest)


class Recorded:
    """A stand-in launch entity remembering its constructor arguments, bound to the real class' signature."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        signature(type(self).__name__).bind(*args, **kwargs)  # TypeError for a misspelt or missing keyword
        self.args, self.kwargs = args, kwargs


class LaunchConfiguration(Recorded):
    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.name = name

    def perform(self, context: Any) -> str:
        return context.launch_configurations[self.name]  # KeyError for undeclared names, as in launch


def stub_modules() -> dict[str, types.ModuleType]:
    def module(name: str, **attributes: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attributes)
        return mod

    classes = {
        name: type(name, (Recorded,), {})
        for name in (
            "LaunchDescription",
            "DeclareLaunchArgument",
            "OpaqueFunction",
            "SetEnvironmentVariable",
            "IfCondition",
            "Node",
        )
    }
    return {
        "launch": module("launch", LaunchDescription=classes["LaunchDescription"]),
        "launch.actions": module(
            "launch.actions",
            DeclareLaunchArgument=classes["DeclareLaunchArgument"],
            OpaqueFunction=classes["OpaqueFunction"],
            SetEnvironmentVariable=classes["SetEnvironmentVariable"],
        ),
        "launch.conditions": module("launch.conditions", IfCondition=classes["IfCondition"]),
        "launch.substitutions": module("launch.substitutions", LaunchConfiguration=LaunchConfiguration),
        "launch_ros": module("launch_ros"),
        "launch_ros.actions": module("launch_ros.actions", Node=classes["Node"]),
    }


def test_stand_ins_refuse_what_launch_refuses() -> None:
    """The signature check is live: misspelt and missing keywords raise, as the real constructors do."""
    node_class = stub_modules()["launch_ros.actions"].Node
    node_class(executable="x", package="p", ros_arguments=["--log-level", "info"], sigterm_timeout="5", condition=None)
    with pytest.raises(TypeError):
        node_class(executable="x", ros_argument=["--log-level", "info"])
    with pytest.raises(TypeError):
        node_class(executable="x", sigterm_timout="5")
    with pytest.raises(TypeError):
        node_class(package="p")  # executable is required
    with pytest.raises(TypeError):
        stub_modules()["launch.actions"].DeclareLaunchArgument("a", default="x")


@pytest.fixture
def launch_module(monkeypatch):
    for name, module in stub_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("wam_diff2_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arguments(launch_module) -> dict[str, Any]:
    description = launch_module.generate_launch_description()
    entities = description.args[0]
    declared = {e.args[0]: e.kwargs for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    return {"declared": declared, "entities": entities}


def context(launch_module, **values: str) -> Any:
    declared = arguments(launch_module)["declared"]
    configurations = {name: kwargs["default_value"] for name, kwargs in declared.items()}
    unknown = set(values) - set(configurations)
    assert not unknown, f"undeclared launch arguments {unknown}"
    configurations.update(values)
    return types.SimpleNamespace(launch_configurations=configurations)


def nodes(actions: list[Any], package: str = "wam_diff2_ros") -> list[Any]:
    return [a for a in actions if type(a).__name__ == "Node" and a.kwargs["package"] == package]


def rviz_action(actions: list[Any], launch_module, ctx) -> Any | None:
    """The RViz Node action when its IfCondition holds for ``ctx`` (None otherwise)."""
    (rviz,) = nodes(actions, "rviz2")
    condition = rviz.kwargs["condition"]
    assert type(condition).__name__ == "IfCondition"
    (expression,) = condition.args
    return rviz if expression.perform(ctx).strip().lower() in ("true", "1") else None


def test_declared_arguments(launch_module) -> None:
    parts = arguments(launch_module)
    declared = parts["declared"]
    for name in ("model_path", "device", "dtype", "params_file", "namespace", "use_sim_time", "rviz"):
        assert name in declared, name
        assert declared[name]["description"]
    for name in ("image_topics", "camera_info_topics", "odometry_topic", "command_topic", "acceleration_topic"):
        assert name in declared
    assert declared["use_sim_time"]["default_value"] == "false" and declared["rviz"]["default_value"] == "false"
    assert declared["sigterm_timeout"]["default_value"] == "5"
    assert type(parts["entities"][-1]).__name__ == "OpaqueFunction"
    assert parts["entities"][-1].kwargs["function"] is launch_module.launch_setup


def test_default_actions(launch_module, monkeypatch) -> None:
    for name in ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"):
        monkeypatch.delenv(name, raising=False)
    ctx = context(launch_module)
    actions = launch_module.launch_setup(ctx)
    (node,) = nodes(actions)
    assert rviz_action(actions, launch_module, ctx) is None  # RViz only with rviz:=true
    kwargs = node.kwargs
    assert kwargs["ros_arguments"] == ["--log-level", "info"] and "arguments" not in kwargs
    assert kwargs["sigterm_timeout"] == "5"
    assert (kwargs["package"], kwargs["executable"], kwargs["name"], kwargs["namespace"]) == (
        "wam_diff2_ros",
        "wam_diff2_node",
        "wam_diff2",
        "",
    )
    params_file, overrides = kwargs["parameters"]
    assert Path(params_file) == REPO_ROOT / "config" / "wam_diff2.yaml" and Path(params_file).is_file()
    assert overrides == {"use_sim_time": False}  # the YAML's model.* are kept
    assert kwargs["remappings"] == []
    environment = [a for a in actions if type(a).__name__ == "SetEnvironmentVariable"]
    assert environment, "the Fast DDS profile variable is set for the launched processes"
    assert all(Path(a.args[1]) == REPO_ROOT / "config" / "fastdds_profile.xml" for a in environment)
    assert {a.args[0] for a in environment} <= {"FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"}


def test_arguments_become_overrides_remaps_and_rviz(launch_module, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/my_profile.xml")
    (tmp_path / "mine.yaml").write_text("{}\n", encoding="utf-8")
    ctx = context(
        launch_module,
        model_path="/models/wam",
        device="cuda:1",
        dtype="float16",
        params_file=str(tmp_path / "mine.yaml"),
        namespace="vehicle",
        use_sim_time="true",
        rviz="true",
        image_topics="/cam/front/image_raw, /cam/left/image_raw/compressed",
        camera_info_topics="/cam/front/camera_info",
        odometry_topic="/localization/kinematic_state",
        command_topic="/planning/command",
        log_level="debug",
        sigterm_timeout="15",
    )
    actions = launch_module.launch_setup(ctx)
    assert [type(a).__name__ for a in actions] == ["Node", "Node"]  # the user's profile variable is kept
    (planner,) = nodes(actions)
    rviz = rviz_action(actions, launch_module, ctx)
    assert rviz is not None
    assert planner.kwargs["parameters"] == [
        str(tmp_path / "mine.yaml"),
        {"use_sim_time": True, "model.path": "/models/wam", "model.device": "cuda:1", "model.dtype": "float16"},
    ]
    assert planner.kwargs["namespace"] == "vehicle"
    assert planner.kwargs["remappings"] == [
        ("~/input/image_0", "/cam/front/image_raw"),
        ("~/input/image_1", "/cam/left/image_raw/compressed"),
        ("~/input/camera_info_0", "/cam/front/camera_info"),
        ("~/input/odometry", "/localization/kinematic_state"),
        ("~/input/command", "/planning/command"),
    ]
    assert planner.kwargs["ros_arguments"] == ["--log-level", "debug"]
    assert planner.kwargs["sigterm_timeout"] == "15"
    assert rviz.kwargs["package"] == "rviz2"
    assert Path(rviz.kwargs["arguments"][1]) == REPO_ROOT / "config" / "wam_diff2.rviz"
    assert rviz.kwargs["parameters"] == [{"use_sim_time": True}]


def ament_prefix(root: Path, packages: dict[str, str]) -> Path:
    """An install prefix holding ``packages`` (name -> executable) as the ament index and launch_ros see them."""
    index = root / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    for package, executable in packages.items():
        (index / package).write_text("", encoding="utf-8")
        program = root / "lib" / package / executable
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\n", encoding="utf-8")
        program.chmod(0o755)
    if "wam_diff2_ros" in packages:  # its share directory: the package's config (parameters, RViz)
        (root / "share" / "wam_diff2_ros").mkdir(parents=True)
        (root / "share" / "wam_diff2_ros" / "config").symlink_to(REPO_ROOT / "config")
    return root


def test_a_launch_missing_anything_starts_nothing(launch_module, monkeypatch, tmp_path) -> None:
    """rviz:=true without rviz2 (or a missing parameter file, RViz config, node executable): launch_setup raises
    before it returns a single action, so launch starts nothing (not the planner alone, orphaned)."""
    pytest.importorskip("ament_index_python")
    planner_only = ament_prefix(tmp_path / "planner", {"wam_diff2_ros": "wam_diff2_node"})
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(planner_only))
    assert nodes(launch_module.launch_setup(context(launch_module)))  # rviz:=false needs no rviz2
    for values, expected in (
        ({"rviz": "true"}, "rviz:=true needs RViz: package 'rviz2' not found"),
        ({"params_file": str(tmp_path / "missing.yaml")}, "missing.yaml' is not a file"),
    ):
        with pytest.raises(launch_module.LaunchRequirementError, match="nothing was started") as raised:
            launch_module.launch_setup(context(launch_module, **values))
        assert expected in str(raised.value)
    with_rviz = ament_prefix(tmp_path / "both", {"wam_diff2_ros": "wam_diff2_node", "rviz2": "rviz2"})
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(with_rviz))
    ctx = context(launch_module, rviz="true")
    assert rviz_action(launch_module.launch_setup(ctx), launch_module, ctx) is not None
    with pytest.raises(launch_module.LaunchRequirementError, match=r"rviz_config '/no/such\.rviz' is not a file"):
        launch_module.launch_setup(context(launch_module, rviz="true", rviz_config="/no/such.rviz"))
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(ament_prefix(tmp_path / "rviz", {"rviz2": "rviz2"})))
    with pytest.raises(launch_module.LaunchRequirementError, match="package 'wam_diff2_ros' not found"):
        launch_module.launch_setup(context(launch_module))


def test_rviz_config_shows_the_outputs() -> None:
    import yaml

    config = yaml.safe_load((REPO_ROOT / "config" / "wam_diff2.rviz").read_text(encoding="utf-8"))
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "base_link"
    displays = {d["Class"]: d for d in manager["Displays"]}
    assert displays["rviz_default_plugins/Path"]["Topic"]["Value"] == "/wam_diff2/output/path"
    assert displays["rviz_default_plugins/MarkerArray"]["Topic"]["Value"] == "/wam_diff2/output/markers"
    image = displays["rviz_default_plugins/Image"]["Topic"]
    assert image["Value"] == "/wam_diff2/debug/image" and image["Reliability Policy"] == "Best Effort"


# --- the launched command, for real ------------------------------------------------------------------------------


def command_line(node_action: Any, tmp_path: Path) -> list[str]:
    """The command launch_ros builds for a Node action: executable, its arguments, then a --ros-args section with
    name, namespace, parameter files (dicts written to a temporary YAML under ``/**``) and remaps."""
    import yaml

    kwargs = node_action.kwargs
    executable = Path(sys.executable).with_name(kwargs["executable"])
    command = [str(executable), *kwargs.get("arguments", []), "--ros-args", *kwargs.get("ros_arguments", [])]
    command += ["-r", f"__node:={kwargs['name']}"]
    if kwargs.get("namespace"):
        command += ["-r", f"__ns:=/{kwargs['namespace'].strip('/')}"]
    for index, entry in enumerate(kwargs.get("parameters", [])):
        if isinstance(entry, dict):
            path = tmp_path / f"launch_params_{index}.yaml"
            path.write_text(yaml.safe_dump({"/**": {"ros__parameters": entry}}), encoding="utf-8")
            entry = path
        command += ["--params-file", str(entry)]
    for source, target in kwargs.get("remappings", []):
        command += ["-r", f"{source}:={target}"]
    return command


@pytest.mark.ros
def test_launched_node_comes_up_with_the_yaml(launch_module, tmp_path) -> None:
    pytest.importorskip("rclpy", reason="rclpy is not importable")
    from core_helpers import tiny_checkpoint, wait_until
    from node_helpers import Harness, NodeProcess

    ctx = context(
        launch_module,
        model_path=str(tiny_checkpoint()),
        device="cpu",
        dtype="float32",
        namespace="launch_test",
        image_topics="/launch_test/camera/front/image_raw",
        odometry_topic="/launch_test/odom",
    )
    (node_action,) = nodes(launch_module.launch_setup(ctx))
    command = command_line(node_action, tmp_path)
    assert Path(command[0]).is_file(), f"console script {command[0]} is not installed"
    harness = Harness("launch_test_harness")
    process = NodeProcess(command, tmp_path / "node.log")
    fqn = "/launch_test/wam_diff2"
    try:
        assert wait_until(lambda: harness.lifecycle_state(fqn, timeout=1.0) == "active", timeout=90), process.output()
        values = harness.get_parameters(
            fqn,
            [
                "model.path",
                "model.device",
                "model.dtype",
                "planning.rate_hz",
                "decoding.block_size",
                "qos.image.reliability",
            ],
        )
        assert values is not None
        assert values[0].string_value == str(tiny_checkpoint())
        assert (values[1].string_value, values[2].string_value) == ("cpu", "float32")
        assert values[3].double_value == 2.0 and values[4].integer_value == 32  # from config/wam_diff2.yaml
        assert values[5].string_value == "best_effort"
        assert wait_until(lambda: harness.node.count_subscribers("/launch_test/camera/front/image_raw") >= 1)
        assert wait_until(lambda: harness.node.count_subscribers("/launch_test/odom") >= 1)
        assert harness.node.count_subscribers(f"{fqn}/input/command") >= 1  # not remapped: the private name
        assert f"model {tiny_checkpoint().name} loaded on cpu (float32)" in process.output()
    finally:
        code = process.stop()
        harness.close()
    assert code == 0, process.output()
