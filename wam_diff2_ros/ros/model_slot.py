"""The node's model (:class:`ModelSlot`): loaded from ``model.*`` through the node's engine factory (and warmed
up), kept across configures of the same path, cancelled at process exit, closed; its state goes to
``/diagnostics`` (:class:`~.diagnostics.NodeHealth` ``set_model``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch

from wam_diff2_ros.core.checkpoint import release_device_cache, resolve_device
from wam_diff2_ros.core.engine.cpu_kernels import kernel_isa, kernel_loads, load_kernel
from wam_diff2_ros.core.planning import EngineLike, describe_decoding
from wam_diff2_ros.core.prompts import build_planning_prompt

from .diagnostics import NodeHealth
from .params import NodeConfig

EngineFactory = Callable[[NodeConfig], EngineLike]


def cpu_threads_for(config: NodeConfig) -> int | None:
    """torch's thread count for a model on the CPU: ``model.cpu_threads``, or with 0 one fewer than the cores this
    process may use (at least 1); None when the model does not run on the CPU. Why one fewer: torch's threads
    wait for each other at every operation, and the executor's and DDS's threads receiving camera frames on the
    same cores stall them all (on 2 cores a plan took 3.2 s with 2 threads under one 10 Hz camera, 1.1 s with
    1; docs/node.md)."""
    try:
        if resolve_device(config.device).type != "cpu":
            return None
    except (ValueError, RuntimeError):  # no such device: loading the model reports it
        return None
    if config.cpu_threads > 0:
        return config.cpu_threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


class ModelSlot:
    """At most one loaded engine (see the module docstring)."""

    def __init__(self, health: NodeHealth, logger: Any, publish_diagnostics: Callable[[], None]) -> None:
        self._health = health
        self._logger = logger
        self._publish_diagnostics = publish_diagnostics
        self.engine: EngineLike | None = None
        self.path: str | None = None

    def load(self, config: NodeConfig, factory: EngineFactory) -> bool:
        """The engine for ``config.model_path`` (kept when it is loaded already); False when it cannot be loaded
        (logged, reported)."""
        threads = cpu_threads_for(config)
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)  # before the engine: the CPU kernels' probe runs at this count
            self._logger.info(f"torch uses {threads} CPU thread(s) (model.cpu_threads {config.cpu_threads})")
        if self.engine is not None and self.path == config.model_path:
            return True
        self.close()
        self._health.set_model("loading", path=config.model_path)
        self._publish_diagnostics()
        started = time.perf_counter()
        try:
            engine = factory(config)
        except Exception as exc:  # CheckpointError, device errors, out of memory ...
            self._logger.error(f"configure failed: cannot load the model from {config.model_path!r}: {exc}")
            self._health.set_model("failed", error=f"cannot load {config.model_path!r}: {exc}", path=config.model_path)
            self._publish_diagnostics()
            return False
        self.engine = engine
        self.path = config.model_path
        device, dtype = str(getattr(engine, "device", "?")), str(getattr(engine, "dtype", "?")).replace("torch.", "")
        self._health.set_model("loaded", name=engine.name, path=config.model_path, device=device, dtype=dtype)
        loaded = f"model {engine.name} loaded on {device} ({dtype}) in {time.perf_counter() - started:.1f} s"
        decoding = describe_decoding(engine, config.decode)
        self._logger.info(loaded + (f"; decoding engine {decoding}" if decoding else ""))
        if device == "cpu" and dtype == "float32" and (decoding or "").startswith("fast"):
            self._load_cpu_kernels()
        if config.warmup:
            self._warmup(engine, config)
        return True

    def _load_cpu_kernels(self) -> None:
        """Build or load the fast engine's CPU kernels now, before activation, so the first plan never waits for
        them (a build happens once per environment; scripts/bootstrap.sh does it)."""
        isa = kernel_isa()
        load_kernel(isa)
        self._logger.info(f"fast engine's CPU kernels ({isa}): {kernel_loads().get(isa, '?')}")

    def _warmup(self, engine: EngineLike, config: NodeConfig) -> None:
        """One plan as the node asks for it (template, planning cameras, decoding budget) on gray frames of
        ``model.warmup_image_size``: the real plans then find lazy state initialised and, with the fast engine
        on CUDA, the step graphs of their batch, block and cache bucket captured."""
        import numpy as np

        width, height = config.warmup_image_size
        frames = [np.full((height, width, 3), 128, dtype=np.uint8) for _ in config.planning_cameras]
        started = time.perf_counter()
        try:
            prompt = build_planning_prompt(
                "straight", (0.0, 0.0), (0.0, 0.0), template=config.template, num_images=len(frames)
            )
            engine.generate(prompt, frames, decode=config.decode, system=config.system)
            self._logger.info(
                f"warm-up plan ({len(frames)} x {width}x{height}) took {time.perf_counter() - started:.1f} s"
            )
        except Exception as exc:
            self._logger.warning(f"warm-up plan failed: {exc}")

    def close(self) -> None:
        """Unload the engine (``engine.close()``)."""
        engine, self.engine = self.engine, None
        self.path = None
        if engine is not None and hasattr(engine, "close"):
            try:
                engine.close()
            except Exception as exc:
                self._logger.warning(f"closing the engine failed: {exc}")
        self._health.set_model("not loaded")

    def abandon(self) -> None:
        """Forget the engine without closing it: a busy worker still holds it (closing would wait for the
        decode); the process exit frees it."""
        self.engine = None
        self.path = None

    def cancel(self) -> None:
        """Stop a running decode before its next denoising step (``engine.cancel()`` where the engine has it)."""
        cancel = getattr(self.engine, "cancel", None)
        if callable(cancel):
            cancel()

    def release_cache(self) -> None:
        """Return cached device memory (the engine stays loaded)."""
        if self.engine is not None:
            release_device_cache(getattr(self.engine, "device", "cpu"))
