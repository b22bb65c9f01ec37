"""The per-instant inference pipeline: observation → prompt → decode → parse → result (ROS-free).

:class:`InferencePipeline` wraps an engine (:class:`wam_diff2_ros.core.engine.Engine`, or any object with
the same ``generate`` and ``name``) and turns

* an :class:`~wam_diff2_ros.core.observation.Observation` into a :class:`PlanResult`
  (:meth:`InferencePipeline.plan`),
* one camera frame into a :class:`DetectionResult` (:meth:`InferencePipeline.detect`),
* a question and frames into an :class:`AnswerResult` (:meth:`InferencePipeline.answer`).

The node and the rosbag replay tool both call it, so a replay reproduces the node's answers for the
same inputs. An unusable model answer is a result (``valid=False`` with a reason), never an exception;
inputs the processor rejects raise :class:`PlanningInputError`; anything the engine raises otherwise
propagates to the caller (the node reports it as an ERROR diagnostic and keeps running).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .camera import CameraFrame, CameraIntrinsics
from .candidates import (
    DEFAULT_CANDIDATE_TEMPERATURE,
    DEFAULT_CANDIDATES,
    Candidate,
    answer_waypoints,
    candidate_seed,
    check_candidates,
    choose,
    generate_candidates,
    row_temperatures,
)
from .confidence import generation_waypoint_probabilities, plan_confidence, waypoint_confidence
from .engine.decoding import DecodeConfig
from .image_preprocess import ImageInputError
from .observation import Observation
from .parsing import (
    DEFAULT_KINEMATIC_LIMITS,
    Detection,
    KinematicLimits,
    Waypoint,
    clean_answer,
    parse_detections,
    parse_waypoints,
)
from .prompts import build_detection_prompt, build_planning_prompt, build_vqa_prompt, resolve_planning_template
from .timing import StageTiming

DEFAULT_DETECTION_CATEGORIES = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic light", "traffic sign")


class PlanningInputError(ValueError):
    """The observation cannot be turned into model input (the processor or prompt builder refused it)."""


class EngineLike(Protocol):
    """What the pipeline needs from an engine."""

    name: str

    def generate(
        self,
        prompt: str,
        images: Sequence[Any] = (),
        decode: DecodeConfig | None = None,
        system: str | None = None,
        started_ns: int | None = None,
    ) -> Any:
        """Decode one prompt (a deadline counts from ``started_ns``, ``time.monotonic_ns``); returns an object
        like :class:`wam_diff2_ros.core.engine.Generation`."""
        ...


def describe_decoding(engine: Any, decode: DecodeConfig) -> str | None:
    """Which decoding engine ``engine`` runs ``decode`` with, and why (`Engine.describe_decoding`); None for
    engines that cannot say (test doubles)."""
    describe = getattr(engine, "describe_decoding", None)
    return describe(decode) if callable(describe) else None


@dataclass(frozen=True)
class PlanningConfig:
    """How plans, detections and answers are asked for and read.

    ``template``: a built-in template name or custom text (see :mod:`wam_diff2_ros.core.prompts`);
    ``system``: a system turn, None for none (the trained model uses none). Detection and VQA use
    ``decode`` with their own ``max_new_tokens``. ``kinematics``: the plausibility gate's limits
    (:class:`~wam_diff2_ros.core.kinematics.KinematicLimits`); plans also get the first-waypoint rule with
    the observation's speed.
    """

    template: str = "navsim"
    system: str | None = None
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    num_waypoints: int = 8
    waypoint_dt_s: float = 0.5
    max_abs_coord_m: float = 100.0
    max_step_m: float = 20.0
    min_confidence: float = 0.0  # plans below this confidence are withheld by the node (0 = off)
    kinematics: KinematicLimits = DEFAULT_KINEMATIC_LIMITS
    detection_categories: tuple[str, ...] = DEFAULT_DETECTION_CATEGORIES
    detection_max_new_tokens: int = 512
    vqa_max_new_tokens: int = 128
    candidates: int = DEFAULT_CANDIDATES  # answers decoded per plan in one batch (core/candidates.py)
    candidate_temperature: float = DEFAULT_CANDIDATE_TEMPERATURE  # sampling temperature of rows 1..

    def __post_init__(self) -> None:
        resolve_planning_template(self.template)  # raises ValueError with the reason
        check_candidates(self.candidates, self.candidate_temperature)
        if self.num_waypoints < 1:
            raise ValueError(f"planning.num_waypoints must be >= 1, got {self.num_waypoints}")
        for name in ("waypoint_dt_s", "max_abs_coord_m", "max_step_m"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"planning.{name} must be > 0, got {value}")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"planning.min_confidence must be in [0, 1], got {self.min_confidence}")
        build_detection_prompt(self.detection_categories)  # checks the categories
        for name in ("detection_max_new_tokens", "vqa_max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def detection_decode(self) -> DecodeConfig:
        """Decoding parameters for detection."""
        return self.decode.with_overrides(max_new_tokens=self.detection_max_new_tokens)

    @property
    def vqa_decode(self) -> DecodeConfig:
        """Decoding parameters for VQA."""
        return self.decode.with_overrides(max_new_tokens=self.vqa_max_new_tokens)


@dataclass(frozen=True)
class PlanResult:
    """The outcome of one planning inference. ``valid`` False: ``reason`` says why, ``waypoints`` is empty."""

    observation: Observation = field(repr=False)
    prompt: str
    raw_text: str
    valid: bool
    reason: str
    waypoints: tuple[Waypoint, ...]
    timing: StageTiming
    steps_per_block: tuple[int, ...]
    finished: bool
    model: str
    waypoint_confidence: tuple[float, ...] = ()  # per waypoint in [0, 1] (core/confidence.py); () if unknown
    confidence: float = 0.0  # the least confident waypoint; 0 if unknown
    answer_confidence: float | None = None  # the least confident token of the whole answer (valid or not)
    # per waypoint the winning probabilities of its numbers' tokens (what the confidence is computed from)
    waypoint_token_probabilities: tuple[tuple[float, ...], ...] = field(default=(), repr=False)
    deadline_ms: float = 0.0  # the decoding deadline the plan was made under; 0 = none
    deadline_met: bool = True  # the plan was ready (decoded and parsed) within deadline_ms of its start
    early_tokens: int = 0  # tokens committed early to meet the deadline
    # with planning.candidates > 1: every decoded answer (core/candidates.py) and which one this plan is (-1: none)
    candidates: tuple[Candidate, ...] = field(default=(), repr=False)
    chosen_candidate: int = -1
    # an invalid answer that still reads as waypoints (the kinematic gate or a bound rejected it); its
    # waypoint_confidence / confidence are those of these waypoints, so that rejection can be set against them
    rejected_waypoints: tuple[Waypoint, ...] = ()

    @property
    def stamp_ns(self) -> int:
        """The plan's stamp: the front image's stamp."""
        return self.observation.stamp_ns


@dataclass(frozen=True)
class DetectionResult:
    """Detections on one camera frame (boxes in pixels of the original image)."""

    camera: str
    camera_index: int
    stamp_ns: int
    frame_id: str
    width: int
    height: int
    intrinsics: CameraIntrinsics
    detections: tuple[Detection, ...]
    skipped: int
    reason: str
    raw_text: str
    prompt: str
    timing: StageTiming
    steps_per_block: tuple[int, ...]
    model: str
    image: Any = field(default=None, repr=False, compare=False)  # the RGB array, for the debug image


@dataclass(frozen=True)
class AnswerResult:
    """A VQA answer about the given frames; ``stamp_ns`` is the first frame's stamp."""

    question: str
    answer: str
    raw_text: str
    cameras: tuple[str, ...]
    stamp_ns: int
    timing: StageTiming
    model: str


def _generate(
    engine: EngineLike,
    prompt: str,
    images: list[Any],
    decode: DecodeConfig,
    system: str | None,
    started_ns: int | None = None,
) -> tuple[Any, float]:
    started = time.perf_counter()
    try:
        if started_ns is None:
            generation = engine.generate(prompt, images, decode=decode, system=system)
        else:
            generation = engine.generate(prompt, images, decode=decode, system=system, started_ns=started_ns)
    except ImageInputError as exc:
        raise PlanningInputError(f"image rejected by the processor: {exc}") from exc
    return generation, time.perf_counter() - started


def read_rejected(text: str, num_waypoints: int, dt: float) -> tuple[tuple[Waypoint, ...], Any] | tuple[()]:
    """The waypoints of an answer the plan's rules rejected, read without the kinematic gate and bounds, and that
    parse (for their token probabilities); () when the answer does not read as waypoints at all."""
    loose = parse_waypoints(text, num_waypoints, dt, 1e9, 1e9, check_kinematics=False)
    return (loose.waypoints, loose) if loose.valid else ()


class InferencePipeline:
    """Observation → prompt → engine → parsed result, for planning, detection and VQA."""

    def __init__(self, engine: EngineLike, config: PlanningConfig | None = None) -> None:
        self.engine = engine
        self.config = config or PlanningConfig()

    @property
    def model_name(self) -> str:
        """The engine's checkpoint name."""
        return str(getattr(self.engine, "name", "unknown"))

    def planning_prompt(self, observation: Observation) -> str:
        """The NAVSIM prompt for ``observation`` (raises :class:`PlanningInputError` for bad telemetry)."""
        try:
            return build_planning_prompt(
                observation.command,
                observation.velocity,
                observation.acceleration,
                template=self.config.template,
                num_images=len(observation.frames),
            )
        except ValueError as exc:
            raise PlanningInputError(f"cannot build the planning prompt: {exc}") from exc

    def plan(self, observation: Observation) -> PlanResult:
        """Ask for waypoints for ``observation`` and parse them (an unusable answer gives ``valid=False``).

        With ``decode.deadline_ms`` the deadline counts from this call (``time.monotonic_ns``) to the parsed
        plan; the result says whether it was met and carries the per-waypoint confidence.
        """
        decode = self.config.decode
        started_ns = time.monotonic_ns() if decode.deadline_ms > 0 else None
        prompt = self.planning_prompt(observation)
        if self.config.candidates > 1:
            return self._plan_candidates(observation, prompt, started_ns)
        generation, wall_s = _generate(self.engine, prompt, observation.images, decode, self.config.system, started_ns)
        return self._plan_result(observation, prompt, generation, wall_s, started_ns)[0]

    def _plan_candidates(self, observation: Observation, prompt: str, started_ns: int | None) -> PlanResult:
        """``planning.candidates`` answers in one batch, each parsed and gated; the best valid one, with all of
        them (core/candidates.py). The deadline bounds the whole batch."""
        config = self.config
        temperatures = row_temperatures(config.candidates, config.candidate_temperature)
        decode = config.decode.with_overrides(seed=candidate_seed(observation.stamp_ns, config.decode.seed))
        started = time.perf_counter()
        try:
            generations = generate_candidates(
                self.engine, prompt, observation.images, temperatures, decode, config.system, started_ns
            )
        except ImageInputError as exc:
            raise PlanningInputError(f"image rejected by the processor: {exc}") from exc
        wall_s = time.perf_counter() - started
        parsed = [self._plan_result(observation, prompt, g, wall_s, started_ns) for g in generations]
        results = [result for result, _ in parsed]
        candidates = tuple(
            Candidate(
                index=row,
                temperature=temperatures[row],
                valid=result.valid,
                reason=result.reason,
                score=result.confidence if result.valid else 0.0,
                waypoints=result.waypoints or answer_waypoints(numbers, config.num_waypoints, config.waypoint_dt_s),
                waypoint_confidence=result.waypoint_confidence,
                raw_text=result.raw_text,
            )
            for row, (result, numbers) in enumerate(parsed)
        )
        chosen = choose(candidates)
        if chosen is None:
            reasons = "; ".join(f"#{c.index}: {c.reason}" for c in candidates)
            return replace(
                results[0], reason=f"no valid candidate of {len(candidates)} ({reasons})", candidates=candidates
            )
        return replace(results[chosen], candidates=candidates, chosen_candidate=chosen)

    def _plan_result(
        self, observation: Observation, prompt: str, generation: Any, wall_s: float, started_ns: int | None
    ) -> tuple[PlanResult, tuple[float, ...]]:
        """One decoded answer parsed, gated and timed, and the numbers the parser read."""
        decode = self.config.decode
        text = str(generation.text)
        parsed = parse_waypoints(
            text,
            num_waypoints=self.config.num_waypoints,
            dt=self.config.waypoint_dt_s,
            max_abs_coord_m=self.config.max_abs_coord_m,
            max_step_m=self.config.max_step_m,
            kinematics=self.config.kinematics,
            current_speed_mps=math.hypot(*observation.velocity),
        )
        reason = parsed.reason
        if not parsed.valid and not getattr(generation, "finished", True):
            reason += f" (no end token within {self.config.decode.max_new_tokens} new tokens)"
        rejected = () if parsed.valid else read_rejected(text, self.config.num_waypoints, self.config.waypoint_dt_s)
        probabilities = generation_waypoint_probabilities(generation, rejected[1] if rejected else parsed)
        waypoint_conf = waypoint_confidence(probabilities) if probabilities else ()
        deadline_met = bool(getattr(generation, "deadline_met", True))
        if started_ns is not None:
            deadline_met = deadline_met and time.monotonic_ns() - started_ns <= decode.deadline_ms * 1e6
        result = PlanResult(
            observation=observation,
            prompt=prompt,
            raw_text=text,
            valid=parsed.valid,
            reason="" if parsed.valid else reason,
            waypoints=parsed.waypoints,
            timing=StageTiming.from_generation(generation, wall_s),
            steps_per_block=tuple(int(s) for s in getattr(generation, "steps_per_block", ())),
            finished=bool(getattr(generation, "finished", True)),
            model=self.model_name,
            waypoint_confidence=waypoint_conf,
            confidence=plan_confidence(waypoint_conf),
            answer_confidence=min(tokens) if (tokens := getattr(generation, "token_confidence", None)) else None,
            waypoint_token_probabilities=probabilities,
            deadline_ms=decode.deadline_ms,
            deadline_met=deadline_met,
            early_tokens=int(getattr(generation, "early_tokens", 0)),
            rejected_waypoints=rejected[0] if rejected else (),
        )
        return result, parsed.numbers

    def detect(self, frame: CameraFrame, categories: Sequence[str] | None = None) -> DetectionResult:
        """Detect ``categories`` (default: the configured ones) in one frame."""
        prompt = build_detection_prompt(list(categories or self.config.detection_categories), num_images=1)
        generation, wall_s = _generate(
            self.engine, prompt, [frame.image], self.config.detection_decode, self.config.system
        )
        text = str(generation.text)
        parsed = parse_detections(text, frame.width, frame.height)
        return DetectionResult(
            camera=frame.camera,
            camera_index=frame.index,
            stamp_ns=frame.stamp_ns,
            frame_id=frame.frame_id,
            width=frame.width,
            height=frame.height,
            intrinsics=frame.intrinsics,
            detections=parsed.detections,
            skipped=parsed.skipped,
            reason=parsed.reason,
            raw_text=text,
            prompt=prompt,
            timing=StageTiming.from_generation(generation, wall_s),
            steps_per_block=tuple(int(s) for s in getattr(generation, "steps_per_block", ())),
            model=self.model_name,
            image=frame.image,
        )

    def answer(self, question: str, frames: Sequence[CameraFrame]) -> AnswerResult:
        """Answer a free-text question about ``frames`` (in order); raises ``ValueError`` for an empty question."""
        if not frames:
            raise PlanningInputError("no camera frame to answer about")
        prompt = build_vqa_prompt(question, num_images=len(frames))
        generation, wall_s = _generate(
            self.engine, prompt, [f.image for f in frames], self.config.vqa_decode, self.config.system
        )
        text = str(generation.text)
        return AnswerResult(
            question=question.strip(),
            answer=clean_answer(text),
            raw_text=text,
            cameras=tuple(f.camera for f in frames),
            stamp_ns=frames[0].stamp_ns,
            timing=StageTiming.from_generation(generation, wall_s),
            model=self.model_name,
        )
