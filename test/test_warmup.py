"""The node's warm-up plan (ros.model_slot) on a real tiny engine: shaped as the real plans it precedes."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from core_helpers import tiny_checkpoint

from wam_diff2_ros.core.engine import Engine
from wam_diff2_ros.core.engine.cpu_kernels import kernel_isa, load_kernel
from wam_diff2_ros.core.engine.fast import capacity_bucket
from wam_diff2_ros.core.prompts import build_planning_prompt
from wam_diff2_ros.ros.diagnostics import NodeHealth
from wam_diff2_ros.ros.model_slot import ModelSlot
from wam_diff2_ros.ros.params import NodeConfig, ParameterError


class RecordingEngine:
    """A real engine whose generations are kept (what the warm-up produced)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.generations: list = []

    def generate(self, prompt, images=(), decode=None, system=None):
        generation = self.engine.generate(prompt, images, decode=decode, system=system)
        self.generations.append(generation)
        return generation


def test_warmup_plan_has_the_prompt_length_and_cache_bucket_of_a_real_plan() -> None:
    engine = RecordingEngine(Engine.load(tiny_checkpoint(seed=1), device="cpu", dtype="float32"))
    config = NodeConfig.from_parameters(
        {"model.warmup": True, "model.warmup_image_size": [96, 64], "decoding.max_new_tokens": 64},
        require_model=False,
    )
    slot = ModelSlot(NodeHealth("warmup-test"), logging.getLogger("warmup-test"), lambda: None)
    slot._warmup(engine, config)
    (warmup,) = engine.generations

    camera = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    prompt = build_planning_prompt("left", (7.25, -0.5), (0.4, 0.1), template=config.template, num_images=1)
    real = engine.engine.generate(prompt, [camera], decode=config.decode)

    assert warmup.num_image_tokens == real.num_image_tokens > 0
    assert abs(warmup.num_prompt_tokens - real.num_prompt_tokens) < 16  # only the numbers differ
    budget = config.decode.num_blocks * config.decode.block_size
    assert capacity_bucket(warmup.num_prompt_tokens + budget) == capacity_bucket(real.num_prompt_tokens + budget)


@pytest.mark.parametrize("size", [[1920], [0, 1080], [1920.5, 1080], [1920, 1080, 3]])
def test_warmup_image_size_must_be_two_whole_pixel_counts(size) -> None:
    with pytest.raises(ParameterError, match=r"model\.warmup_image_size"):
        NodeConfig.from_parameters({"model.warmup_image_size": size}, require_model=False)


def test_loading_logs_which_decoding_engine_runs(caplog) -> None:
    config = NodeConfig.from_parameters(
        {"model.path": str(tiny_checkpoint(seed=1)), "model.device": "cpu", "model.dtype": "float32"}
    )
    slot = ModelSlot(NodeHealth("load-test"), logging.getLogger("load-test"), lambda: None)
    with caplog.at_level(logging.INFO, logger="load-test"):
        assert slot.load(config, lambda c: Engine.load(c.model_path, device=c.device, dtype=c.dtype))
    (line,) = [r.getMessage() for r in caplog.records if "loaded on" in r.getMessage()]
    assert line.endswith("decoding engine fast (auto: shown token-identical to exact on cpu float32)")
    # the fast engine's CPU kernels are built or loaded here, before activation, and the time it took is logged
    (kernels,) = [r.getMessage() for r in caplog.records if "CPU kernels" in r.getMessage()]
    timed = re.search(r"\): (loaded|built) in \d+\.\d s$", kernels)
    assert f"({kernel_isa()}): " in kernels and (timed is not None) == (load_kernel() is not None), kernels
    slot.close()


def test_cpu_threads_leave_a_core_to_the_executor(monkeypatch) -> None:
    import os

    import torch

    from wam_diff2_ros.ros.model_slot import cpu_threads_for

    def config(**values) -> NodeConfig:
        return NodeConfig.from_parameters({"model.path": str(tiny_checkpoint(seed=1)), **values})

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert cpu_threads_for(config(**{"model.device": "cpu"})) == 3
    assert cpu_threads_for(config(**{"model.device": "cpu", "model.cpu_threads": 4})) == 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert cpu_threads_for(config(**{"model.device": "cpu"})) == 1
    if not torch.cuda.is_available():
        assert cpu_threads_for(config(**{"model.device": "cuda"})) is None  # not loadable: the load reports it
    with pytest.raises(ParameterError, match=r"model\.cpu_threads: must be >= 0"):
        config(**{"model.cpu_threads": -1})

    previous = torch.get_num_threads()
    slot = ModelSlot(NodeHealth("threads-test"), logging.getLogger("threads-test"), lambda: None)
    try:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        loaded = config(**{"model.device": "cpu", "model.dtype": "float32", "model.cpu_threads": 1})
        assert slot.load(loaded, lambda c: Engine.load(c.model_path, device=c.device, dtype=c.dtype))
        assert torch.get_num_threads() == 1
    finally:
        slot.close()
        torch.set_num_threads(previous)
