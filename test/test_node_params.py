"""ros.params: the parameter table, its YAML documentation and validation (no node)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wam_diff2_ros.core.prompts import NavigationCommand
from wam_diff2_ros.ros.params import (
    PARAMETER_SPECS,
    NodeConfig,
    ParameterError,
    flatten_parameters,
    load_parameters_file,
    validation_problems,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
YAML_PATH = REPO_ROOT / "config" / "wam_diff2.yaml"


def test_yaml_lists_every_parameter_with_its_default() -> None:
    document = yaml.safe_load(YAML_PATH.read_text(encoding="utf-8"))
    assert list(document) == ["/**"]
    values = flatten_parameters(document["/**"]["ros__parameters"])
    assert set(values) == {spec.name for spec in PARAMETER_SPECS}
    for spec in PARAMETER_SPECS:
        assert values[spec.name] == spec.default, spec.name
        assert type(values[spec.name]) is type(spec.default), spec.name
    assert NodeConfig.from_parameters(values, require_model=False).frame_id == "base_link"


def test_defaults_are_the_core_configs_defaults() -> None:
    """The table (and so the YAML) shows the core dataclasses' defaults: the node configured with nothing but
    defaults decodes, plans, synchronises and filters exactly as the core does with its own defaults."""
    import dataclasses

    from wam_diff2_ros.core.acceleration import AccelerationFilterConfig
    from wam_diff2_ros.core.engine.decoding import DecodeConfig
    from wam_diff2_ros.core.observation import SyncConfig
    from wam_diff2_ros.core.planning import PlanningConfig

    config = NodeConfig.from_parameters({}, require_model=False)
    assert config.decode == DecodeConfig()
    assert config.sync == SyncConfig()
    assert config.acceleration_filter == AccelerationFilterConfig()
    core = PlanningConfig()
    for field in dataclasses.fields(PlanningConfig):
        if field.name != "system":  # prompt.system '' = no system turn (PlanningConfig: None)
            assert getattr(config.planning, field.name) == getattr(core, field.name), field.name
    assert config.planning.system is None and core.system is None
    defaults = {spec.name: spec.default for spec in PARAMETER_SPECS}
    for field in dataclasses.fields(DecodeConfig):
        name = f"decoding.{field.name}"
        if name in defaults:
            expected = getattr(DecodeConfig(), field.name)
            assert defaults[name] == (-1 if expected is None else expected), name


def test_every_yaml_parameter_is_documented_by_a_comment() -> None:
    """Walking up from each leaf key through other keys, a comment comes before a blank line."""
    lines = YAML_PATH.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "ros__parameters:")
    for number in range(start + 1, len(lines)):
        line = lines[number].strip()
        if not line or line.startswith("#") or line.endswith(":"):
            continue
        above = number - 1
        while above > start and lines[above].strip() and not lines[above].strip().startswith("#"):
            above -= 1
        assert lines[above].strip().startswith("#"), f"line {number + 1} ({line}) has no comment"


def test_defaults_validate() -> None:
    config = NodeConfig.from_parameters({"model.path": str(REPO_ROOT)})
    assert config.camera_names == ("front",)
    assert config.cameras[0].transport == "raw" and config.cameras[0].frame_id == "front_optical"
    assert config.sync.default_command is None
    assert config.marker_lifetime_s == pytest.approx(0.5)  # one period at 2 Hz
    assert config.detection_marker_lifetime_s == 1.0
    assert config.decode.seed is None and config.system is None
    assert config.qos["image"].reliability == "best_effort" and config.qos["command"].reliability == "reliable"
    assert config.debug_camera_pose is None
    assert config.vqa_cameras == (0,) and config.planning_cameras == (0,)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ParameterError) as raised:
        NodeConfig.from_parameters(
            {
                "model.path": "/no/such/checkpoint",
                "model.device": "gpu",
                "model.dtype": "int8",
                "planning.rate_hz": -1.0,
                "decoding.top_p": 2.0,
                "sync.max_age_ms": 0,
                "command.default": "backwards",
                "cameras.transports": ["raw", "compressed"],
                "detection.camera": "rear",
                "qos.image.reliablity": "best_effort",
            }
        )
    message = str(raised.value)
    for expected in (
        "model.path: '/no/such/checkpoint' is not a directory",
        "model.device: expected auto, cpu, cuda, cuda:N, npu, npu:N, got 'gpu'",
        "model.dtype: must be one of bfloat16, float16, float32, got 'int8'",
        "planning.rate_hz: must be >= 0, got -1",
        "decoding.top_p: must be <= 1, got 2",
        "sync.max_age_ms: must be > 0",
        "command.default: unknown navigation command 'backwards'",
        "cameras.transports: needs 1 or 1 entries, got 2",
        "detection.camera: unknown camera 'rear'",
        "qos.image.reliablity: unknown parameter (misspelt?)",
    ):
        assert expected in message


def test_a_fixed_command_source_needs_a_default_and_reads_no_command_input() -> None:
    from wam_diff2_ros.ros.input_rows import input_table
    from wam_diff2_ros.ros.runtime import PlannerRuntime

    with pytest.raises(ParameterError, match=r"command\.default: command\.source fixed plans with this command"):
        NodeConfig.from_parameters({"model.path": str(REPO_ROOT), "command.source": "fixed"})
    config = NodeConfig.from_parameters(
        {"model.path": str(REPO_ROOT), "command.source": "fixed", "command.default": "straight"}
    )
    assert config.command_source == "fixed" and config.sync.default_command.value == "straight"
    roles = {row.role for row in input_table(config, PlannerRuntime(config, object(), clock=lambda: 0))}
    assert roles and not roles & {"command", "driving_command", "turn_indicators"}


def test_missing_model_path_is_explained() -> None:
    with pytest.raises(ParameterError, match=r"model\.path: is empty; set it to a checkpoint directory"):
        NodeConfig.from_parameters({})


def test_cameras_and_templates() -> None:
    two = {
        "model.path": str(REPO_ROOT),
        "cameras.names": ["front", "left"],
        "cameras.transports": ["raw", "compressed"],
    }
    with pytest.raises(ParameterError, match=r"1 <image> placeholder.*2 camera"):
        NodeConfig.from_parameters(two)
    template = (
        "Front: <image> Left: <image>\nThe navigation information is: {command}\n"
        "The current velocity is: ({vx},{vy}) and current accelerate is: ({ax},{ay})"
    )
    config = NodeConfig.from_parameters({**two, "prompt.template": template, "vqa.cameras": ["left"]})
    assert [c.transport for c in config.cameras] == ["raw", "compressed"]
    assert config.vqa_cameras == (1,)
    with pytest.raises(ParameterError, match="must be unique"):
        NodeConfig.from_parameters({**two, "cameras.names": ["front", "front"], "prompt.template": template})
    with pytest.raises(ParameterError, match="unknown fields"):
        NodeConfig.from_parameters({"model.path": str(REPO_ROOT), "prompt.template": "<image> {speed} {command}"})


def test_planning_cameras_choose_the_prompt_images() -> None:
    surround = {"model.path": str(REPO_ROOT), "cameras.names": ["front", "left", "right"]}
    config = NodeConfig.from_parameters({**surround, "planning.cameras": ["front"]})  # navsim: one <image>
    assert config.planning_cameras == (0,) and config.vqa_cameras == (0, 1, 2)
    assert NodeConfig.from_parameters({"model.path": str(REPO_ROOT)}).planning_cameras == (0,)
    two_images = "Front <image> right <image> {command} ({vx},{vy}) ({ax},{ay})"
    config = NodeConfig.from_parameters(
        {**surround, "planning.cameras": ["front", "right"], "prompt.template": two_images}
    )
    assert config.planning_cameras == (0, 2)
    for cameras, problem in (
        (["left", "front"], "planning.cameras: must start with the front camera 'front'"),
        (["front", "rear"], "planning.cameras: unknown camera 'rear'"),
        (["front", "front"], "planning.cameras: names a camera twice"),
    ):
        with pytest.raises(ParameterError, match=problem):
            NodeConfig.from_parameters({**surround, "planning.cameras": cameras})
    with pytest.raises(
        ParameterError, match=r"1 <image> placeholder.*2 camera\(s\) go in the planning prompt \(front, left\)"
    ):
        NodeConfig.from_parameters({**surround, "planning.cameras": ["front", "left"]})


def test_types_are_coerced_or_refused() -> None:
    config = NodeConfig.from_parameters(
        {"model.path": str(REPO_ROOT), "decoding.temperature": 0, "planning.rate_hz": 5, "decoding.block_size": 16.0}
    )
    assert config.decode.temperature == 0.0 and config.rate_hz == 5.0 and config.decode.block_size == 16
    with pytest.raises(ParameterError, match="autostart: expected true or false"):
        NodeConfig.from_parameters({"model.path": str(REPO_ROOT), "autostart": "yes"})
    with pytest.raises(ParameterError, match=r"decoding\.block_size: expected an integer"):
        NodeConfig.from_parameters({"model.path": str(REPO_ROOT), "decoding.block_size": 16.5})


def test_options() -> None:
    config = NodeConfig.from_parameters(
        {
            "model.path": str(REPO_ROOT),
            "command.default": "Unknown",
            "markers.lifetime_s": 2.0,
            "detection.rate_hz": 0.5,
            "debug.camera_pose": [1.6, 0.0, 1.45, 0.0, 0.03, 0.0],
            "decoding.seed": 7,
            "prompt.system": "You are a driver.",
            "planning.rate_hz": 0.0,
        }
    )
    assert config.sync.default_command is NavigationCommand.UNKNOWN
    assert config.marker_lifetime_s == 2.0 and config.detection_marker_lifetime_s == 2.0
    assert config.debug_camera_pose == (1.6, 0.0, 1.45, 0.0, 0.03, 0.0)
    assert config.decode.seed == 7 and config.system == "You are a driver."
    auto = NodeConfig.from_parameters({"model.path": str(REPO_ROOT), "planning.rate_hz": 0.0, "detection.rate_hz": 0.5})
    assert auto.marker_lifetime_s == 1.0 and auto.detection_marker_lifetime_s == 2.0
    with pytest.raises(ParameterError, match=r"debug\.camera_pose: needs 6 numbers"):
        NodeConfig.from_parameters({"model.path": str(REPO_ROOT), "debug.camera_pose": [1.0, 2.0]})


def test_parameter_files_merge_like_rcl(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(
        "/wam_diff2:\n  ros__parameters:\n    planning.rate_hz: 4.0\n"
        "/**:\n  ros__parameters:\n    planning:\n      rate_hz: 1.0\n      frame_id: ego\n"
        "other_node:\n  ros__parameters:\n    planning.rate_hz: 9.0\n",
        encoding="utf-8",
    )
    values = load_parameters_file(path)
    assert values == {"planning.rate_hz": 4.0, "planning.frame_id": "ego"}
    assert load_parameters_file(path, node_name="other_node")["planning.rate_hz"] == 9.0
    (tmp_path / "bad.yaml").write_text("/**:\n  parameters: {}\n", encoding="utf-8")
    with pytest.raises(ParameterError, match="no ros__parameters"):
        load_parameters_file(tmp_path / "bad.yaml")


def test_fast_dds_profile_is_set_only_when_the_user_did_not_choose() -> None:
    from wam_diff2_ros.ros import dds

    profile = dds.find_profile({})
    assert profile is not None and profile.name == "fastdds_profile.xml" and profile.is_file()
    env: dict[str, str] = {}
    applied = dds.ensure_fastdds_profile(env)
    assert applied and env == applied and set(applied.values()) == {str(profile)}
    assert set(applied) <= set(dds.PROFILE_VARIABLES)
    if dds.fastdds_major_version({}) == 3:  # this venv ships Fast DDS 3: only the current variable
        assert list(applied) == ["FASTDDS_DEFAULT_PROFILES_FILE"]
    for preset in (
        {"FASTDDS_DEFAULT_PROFILES_FILE": "/mine.xml"},
        {"FASTRTPS_DEFAULT_PROFILES_FILE": "/mine.xml"},
        {"WAM_DIFF2_NO_FASTDDS_PROFILE": "1"},
        {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"},
    ):
        env = dict(preset)
        assert dds.ensure_fastdds_profile(env) == {} and env == preset


def _just(value: float, kind: str, direction: int) -> float | int:
    """The nearest value past ``value`` in ``direction`` (+1 above, -1 below) for an integer or number rule."""
    return int(value) + direction if kind == "integer" else value + direction * 1e-6


def test_declared_ranges_come_from_validation_and_agree_with_the_core_configs() -> None:
    """Every bound the typed declaration carries is one validation (reader + core dataclasses) enforces: the
    bound itself (when inclusive) and values inside validate; values outside do not."""
    from wam_diff2_ros.ros.params import parameter_rules, validation_problems

    base = {"model.path": str(REPO_ROOT)}
    # Companions keep cross-parameter rules (min_pixels <= max_pixels, min_span_s <= window_s) out of the way.
    companions = {
        "model.max_pixels": {"model.min_pixels": 1},
        "acceleration.window_s": {"acceleration.min_span_s": 1e-9},
    }
    rules = parameter_rules()
    assert set(rules) == {spec.name for spec in PARAMETER_SPECS}
    checked = 0
    for name, rule in rules.items():
        if rule.kind not in ("integer", "number"):
            continue
        cast = int if rule.kind == "integer" else float
        values = {**base, **companions.get(name, {})}
        for bound, exclusive, outward in (
            (rule.minimum, rule.exclusive_minimum, -1),
            (rule.maximum, rule.exclusive_maximum, +1),
        ):
            if bound is None:
                continue
            inside = bound if not exclusive else _just(bound, rule.kind, -outward)
            outside = _just(bound, rule.kind, outward) if not exclusive else bound
            assert validation_problems({**values, name: cast(inside)}) == [], (name, inside)
            problems = validation_problems({**values, name: cast(outside)})
            assert any(name in p or p.startswith(name.split(".")[0]) for p in problems), (name, outside, problems)
            checked += 1
    assert checked >= 30
    assert rules["decoding.top_p"].describe() == "> 0, <= 1"
    assert rules["model.dtype"].choices == ("bfloat16", "float16", "float32")
    assert rules["cameras.names"].kind == "strings" and rules["debug.camera_pose"].kind == "numbers"


def test_change_problems_blame_only_the_change() -> None:
    from wam_diff2_ros.ros.params import change_problems, needs_reconfigure

    current = {"model.path": str(REPO_ROOT), "planning.rate_hz": "abc"}  # a bad value waiting for its fix
    assert change_problems(current, {"decoding.block_size": 16}) == []
    problems = change_problems(current, {"decoding.block_size": 0})
    assert "decoding.block_size: must be >= 1, got 0" in problems
    assert not any("rate_hz" in p for p in problems)
    assert needs_reconfigure("model.path") and needs_reconfigure("qos.image.depth")
    assert not needs_reconfigure("planning.rate_hz") and not needs_reconfigure("sync.max_age_ms")
    assert needs_reconfigure("vqa.enabled") and needs_reconfigure("outputs.some_new_option")  # safe default


def test_every_default_declares_a_usable_type() -> None:
    """The typed declaration takes each parameter's type from its default: an empty list would be declared a
    byte array by rclpy (write [''] or [0.0] for "none"), and None has no type."""
    for spec in PARAMETER_SPECS:
        assert spec.default is not None, spec.name
        assert not (isinstance(spec.default, (list, tuple)) and len(spec.default) == 0), spec.name


@pytest.mark.parametrize(
    "spec", [s for s in PARAMETER_SPECS if isinstance(s.default, (int, float)) and not isinstance(s.default, bool)]
)
def test_each_invalid_number_is_reported_once_by_its_own_name(spec) -> None:
    """The reader checks a value, and the section's config class would refuse it again: one line, not two."""
    for bad in (-1, 0, float("nan")):
        value = float(bad) if isinstance(spec.default, float) else bad
        if isinstance(spec.default, int) and not isinstance(value, int):
            continue
        problems = validation_problems({spec.name: value}, require_model=False)
        assert len(problems) <= 1, problems
        assert all(problem.startswith(f"{spec.name}:") for problem in problems), problems


def test_an_invalid_min_turn_radius_is_reported_once() -> None:
    with pytest.raises(ParameterError) as raised:
        NodeConfig.from_parameters({"planning.kinematics.min_turn_radius_m": -1.0}, require_model=False)
    assert str(raised.value).count("min_turn_radius_m") == 1, str(raised.value)
    assert "planning.kinematics.min_turn_radius_m: must be > 0, got -1" in str(raised.value)
