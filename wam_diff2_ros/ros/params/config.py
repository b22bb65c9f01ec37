"""The validated node configuration (:class:`NodeConfig`, built by :mod:`.reader`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wam_diff2_ros.core.acceleration import AccelerationFilterConfig
from wam_diff2_ros.core.engine.decoding import DecodeConfig
from wam_diff2_ros.core.observation import SyncConfig
from wam_diff2_ros.core.planning import PlanningConfig

from ..schedule import Cadence


@dataclass(frozen=True)
class QosSettings:
    """Subscription QoS of one input."""

    reliability: str
    depth: int
    durability: str


@dataclass(frozen=True)
class CameraConfig:
    """One camera: name, transport (raw|compressed), optical frame used when the header has none."""

    name: str
    transport: str
    frame_id: str


@dataclass(frozen=True)
class NodeConfig:
    """Validated node parameters (see :data:`~.specs.PARAMETER_SPECS` for the meaning of each)."""

    values: Mapping[str, Any] = field(repr=False)
    autostart: bool
    model_path: str
    device: str
    dtype: str
    min_pixels: int
    max_pixels: int
    preprocess: str
    cpu_threads: int  # 0 = automatic (ros/model_slot.py cpu_threads_for)
    unload_on_deactivate: bool
    warmup: bool
    warmup_image_size: tuple[int, int]
    decode: DecodeConfig
    template: str
    system: str | None
    cameras: tuple[CameraConfig, ...]
    planning_cameras: tuple[int, ...]  # indices into cameras: the planning prompt's images, front camera first
    fallback_hfov_deg: float
    rate_hz: float
    frame_id: str
    max_plan_age_s: float
    sync: SyncConfig
    qos: Mapping[str, QosSettings]
    acceleration_filter: AccelerationFilterConfig
    planning: PlanningConfig
    detection_rate_hz: float
    detection_camera: int
    detection_marker_depth_m: float
    vqa_enabled: bool
    vqa_cameras: tuple[int, ...]
    marker_lifetime_s: float
    detection_marker_lifetime_s: float
    diagnostics_period_s: float
    warn_throttle_s: float
    invalid_rate_window: int
    debug_image: bool
    debug_camera_pose: tuple[float, float, float, float, float, float] | None
    viewer_port: int = 0
    viewer_host: str = "127.0.0.1"

    @property
    def cadence(self) -> Cadence:
        """When to plan and detect (:mod:`.schedule`)."""
        return Cadence(self.rate_hz, self.detection_rate_hz)

    @property
    def camera_names(self) -> tuple[str, ...]:
        """Camera names in prompt order."""
        return tuple(c.name for c in self.cameras)

    @classmethod
    def from_parameters(cls, values: Mapping[str, Any], require_model: bool = True) -> NodeConfig:
        """Validate ``values`` (parameter name → value; missing names take their defaults).

        Raises :class:`ParameterError` listing every problem. ``require_model=False`` accepts an empty
        ``model.path`` (tests of the parameter layer).
        """
        from .reader import read_config

        return read_config(cls, values, require_model)
