"""The inference engine: a loaded checkpoint that turns (prompt, images) into decoded text.

One `Engine` holds the model, its processor and the block-diffusion decoder; the node, the batch CLI, the
replay tool and the benchmark all call it. Calls are serialised with a lock, so one engine can be shared by
threads.

One denoising step, by module: decoding.py (the rules and the block loop) asks a runner (runners.py: the protocol
and the exact runner; fast.py: the fast one; which one: selection.py) to propose tokens (sampling.py), takes what
the remasking rule and the deadline (deadline.py) allow, and tells its observers (observers.py). The fast
runner's kernels: cpu_kernels.py (CPU), fused.py and triton_kernels.py (the fused engine, CUDA).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import (
    CheckpointInfo,
    inspect_checkpoint,
    load_model,
    load_processor,
    release_device_cache,
    resolve_device,
    resolve_dtype,
    synchronizer,
)
from ..confidence import token_char_spans
from ..device_preprocess import DEFAULT_PREPROCESS, PREPROCESS_MODES
from ..image_preprocess import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS
from ..model import BlockDiffusionBackbone
from ..processor import WamDiff2Processor
from ..timing import StageTiming
from .deadline import DEFAULT_CLOCK, Clock
from .decoding import DecodeConfig, DecodeOutput, block_diffusion_decode
from .selection import Runners, describe_engine

LOG = logging.getLogger(__name__)


@dataclass
class Generation:
    """The decoded answer to one request."""

    text: str
    token_ids: list[int]  # response tokens before the first EOS
    sequence: list[int]  # all response positions, as the reference `generate()` returns them
    steps_per_block: list[int]
    finished: bool  # EOS produced within max_new_tokens
    timing: StageTiming  # the engine's stages, preprocessing included
    num_prompt_tokens: int
    num_image_tokens: int
    prompt_text: str = field(repr=False, default="")
    token_confidence: list[float] = field(default_factory=list)  # per token of token_ids: its winning probability
    early_tokens: int = 0  # tokens committed early to meet the deadline
    deadline_met: bool = True  # decoding ended within decode.deadline_ms of `started_ns` (or no deadline)
    decode_raw: Callable[[list[int]], str] | None = field(default=None, repr=False, compare=False)

    def token_spans(self) -> list[tuple[int, int]] | None:
        """Per token of `token_ids` its characters in `text` (None: not mappable); computed on demand."""
        return None if self.decode_raw is None else token_char_spans(self.decode_raw, self.token_ids)


class Engine:
    """A WAM-Diff2 checkpoint ready to decode."""

    def __init__(
        self,
        model: Any,
        processor: WamDiff2Processor,
        checkpoint: CheckpointInfo,
        device: torch.device,
        preprocess: str = DEFAULT_PREPROCESS,
    ) -> None:
        if preprocess not in PREPROCESS_MODES:
            raise ValueError(f"preprocess must be one of {', '.join(PREPROCESS_MODES)}; got {preprocess!r}")
        self.model = model
        self.processor = processor
        self.checkpoint = checkpoint
        self.device = device
        self._sync = synchronizer(device)
        self.backbone = BlockDiffusionBackbone(model, synchronize=self._sync)
        self.runners = Runners(self.backbone)  # the fast engine's kernels and graphs, kept across calls
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        # per response budget (blocks), how many blocks the last answer took: a deadline is shared among as many
        self._answer_blocks: dict[int, int] = {}
        self.preprocess = preprocess  # host: PIL on the CPU; device: resize and patch cut on `device`
        processor.images_on = device if preprocess == "device" else None
        # an instrument told each decoding phase as it starts (`block_diffusion_decode`'s `observe`), when a
        # call passes none: the end-to-end benchmark times the node's own calls with it
        self.phase_observer: Callable[[str], None] | None = None

    @classmethod
    def load(
        cls,
        checkpoint: str | Path,
        device: str = "auto",
        dtype: str | torch.dtype = "bfloat16",
        min_pixels: int = DEFAULT_MIN_PIXELS,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        preprocess: str = DEFAULT_PREPROCESS,
    ) -> Engine:
        """Validate and load a checkpoint directory onto a device (`auto`, `cpu`, `cuda[:N]`, `npu[:N]`).

        A model name (`"demo"`, `"tiny"`) is resolved by the caller: `Engine.load(resolve_model("demo"))`
        with :func:`wam_diff2_ros.demo.resolve_model`. `preprocess`: `host` (resize and patch cut with PIL on the
        CPU) or `device` (the frame moved first, both on the model's device; the same bits), see
        :mod:`~wam_diff2_ros.core.device_preprocess`.
        """
        info = inspect_checkpoint(checkpoint)
        torch_device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype)
        if torch_device.type == "cpu" and torch_dtype != torch.float32:
            LOG.info("%s on CPU is usually slower than float32 (no native bf16/fp16 units)", torch_dtype)
        processor = load_processor(info, min_pixels=min_pixels, max_pixels=max_pixels)
        model = load_model(info, torch_device, torch_dtype)
        return cls(model, processor, info, torch_device, preprocess=preprocess)

    @property
    def dtype(self) -> torch.dtype:
        """Weight dtype."""
        return self.backbone.dtype

    @property
    def name(self) -> str:
        """Checkpoint directory name."""
        return self.checkpoint.name

    def describe_decoding(self, decode: DecodeConfig | None = None) -> str:
        """Which decoding engine `decode` runs on this engine's device and dtype, and why (for logs)."""
        config = decode or DecodeConfig()
        return describe_engine(config.engine, self.device, self.dtype)

    def generate(
        self,
        prompt: str,
        images: Sequence[Any] = (),
        decode: DecodeConfig | None = None,
        system: str | None = None,
        started_ns: int | None = None,
    ) -> Generation:
        """Answer one prompt whose `<image>` placeholders are filled, in order, by `images`; a deadline
        (`decode.deadline_ms`) counts from `started_ns` (`time.monotonic_ns`; default: now)."""
        from ..prompts import build_messages

        conversation = build_messages(prompt, list(images), system=system)
        return self.generate_conversations([conversation], decode, started_ns=started_ns)[0]

    def generate_candidates(
        self,
        prompt: str,
        images: Sequence[Any] = (),
        temperatures: Sequence[float] = (0.0,),
        decode: DecodeConfig | None = None,
        system: str | None = None,
        started_ns: int | None = None,
    ) -> list[Generation]:
        """One answer per entry of `temperatures` to one prompt, decoded as one batch after one prefill (the
        prompt's cache broadcast to every row; row temperature 0: the greedy answer); seed, top-k / top-p and the
        deadline (for the whole batch) from `decode`."""
        from ..prompts import build_messages

        conversation = build_messages(prompt, list(images), system=system)
        rows = tuple(float(t) for t in temperatures)
        return self.generate_conversations([conversation], decode, started_ns=started_ns, row_temperatures=rows)

    def generate_conversations(
        self,
        conversations: Sequence[list[dict[str, Any]]],
        decode: DecodeConfig | None = None,
        padding_side: str = "left",
        observe: Callable[[str], None] | None = None,
        started_ns: int | None = None,
        clock: Clock | None = None,
        row_temperatures: tuple[float, ...] | None = None,
    ) -> list[Generation]:
        """Decode a batch of chats (message lists with text/image content items) together.

        `observe` is passed to the decoder (told each decoding phase as it starts; for instruments). A deadline
        (`decode.deadline_ms`) counts from `started_ns` on `clock` (ns; `time.monotonic_ns`; default: now, before
        preprocessing). `row_temperatures`: one conversation decoded once per temperature (`generate_candidates`).
        """
        if not conversations:
            return []
        config = decode or DecodeConfig()
        clock = clock or DEFAULT_CLOCK
        if started_ns is None and config.deadline_ms > 0:
            started_ns = clock()
        with self._lock:
            if self.model is None:
                raise RuntimeError("engine is closed")
            started = time.perf_counter()
            inputs = self.processor(list(conversations), padding_side=padding_side)
            # the images travel as uint8 patches and become pixel values on the device: part of preprocessing
            batch = inputs.to(self.device)
            with torch.inference_mode():
                pixel_values = batch.pixel_values
                self._sync()
                preprocess_s = time.perf_counter() - started
                output = block_diffusion_decode(
                    self.backbone,
                    batch.input_ids,
                    batch.attention_mask,
                    pixel_values,
                    batch.image_grid_thw,
                    config,
                    synchronize=self._sync,
                    cancel=self._cancel.is_set,
                    observe=observe or self.phase_observer,
                    started_ns=started_ns,
                    clock=clock,
                    expected_blocks=self._answer_blocks.get(config.num_blocks),
                    runners=self.runners,
                    row_temperatures=row_temperatures,
                )
            self._answer_blocks[config.num_blocks] = len(output.steps_per_block)
            return self._collect(output, inputs, preprocess_s)

    def _collect(self, output: DecodeOutput, inputs: Any, preprocess_s: float) -> list[Generation]:
        timing = output.timing.with_preprocess(preprocess_s)
        results = []
        lengths = inputs.attention_mask.sum(dim=1).tolist()
        for row, token_ids in enumerate(output.token_ids):
            prompt = row if row < len(lengths) else 0  # candidate rows share the one prompt
            results.append(
                Generation(
                    text=self.processor.decode(token_ids),
                    token_ids=token_ids,
                    sequence=output.sequences[row].tolist(),
                    steps_per_block=list(output.steps_per_block),
                    finished=bool(output.finished[row]),
                    timing=timing,
                    num_prompt_tokens=int(lengths[prompt]),
                    num_image_tokens=int(inputs.num_image_tokens[prompt]),
                    prompt_text=inputs.prompt_texts[prompt],
                    token_confidence=list(output.token_confidence[row]),
                    decode_raw=self.processor.decode_raw,
                    early_tokens=int(output.early_tokens[row]),
                    deadline_met=output.deadline_met,
                )
            )
        return results

    def cancel(self) -> None:
        """Stop the running decode (and every later one) between two denoising steps with `DecodeCancelled`."""
        self._cancel.set()

    def close(self) -> None:
        """Drop the model and release its device memory."""
        with self._lock:
            self.model = None
            self.backbone = None  # type: ignore[assignment]
            self.runners = None  # type: ignore[assignment]
            gc.collect()
            release_device_cache(self.device)
