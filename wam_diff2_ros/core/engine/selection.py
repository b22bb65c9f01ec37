"""Which decoding engine runs, chosen in one place, and the runners that execute it, kept across decodes.

Engines (`DecodeConfig.engine`):
- `exact`: the reference's `DynamicCache` and full logits (`runners.ExactRunner`);
- `fast`: static KV cache, masked-row logits on CPU, CUDA graphs on CUDA; token-identical to `exact` where it is
  picked by `auto` (`fast.FastRunner`);
- `fused`: the fast engine with fused step kernels (fused.py, and on CUDA with Triton the kernels of
  triton_kernels.py); not bit-identical, admitted by the agreement yardstick (`wam-diff2-bench agreement`);
- `auto`: `fused` on CUDA where an admission file (`admission_path()`, written by the yardstick) admits it for the
  dtype; else `fast` where it was shown token-identical (`FAST_BY_DEFAULT`); else `exact`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from ..cache import user_cache_root
from ..model import BlockDiffusionBackbone
from .fast import FastRunner
from .runners import ExactRunner, Runner

LOG = logging.getLogger(__name__)

# (device type, dtype) where `auto` picks the fast engine: token-identical to the exact one in the test grid
# (CPU float32 in CI; CUDA float32 in test_fast_decoding_cuda.py, run on an H200) or, for CUDA bfloat16,
# in every comparison measured on an H200 (docs/engine.md); elsewhere (NPU, float16) `auto` is exact.
FAST_BY_DEFAULT = frozenset({("cpu", torch.float32), ("cuda", torch.float32), ("cuda", torch.bfloat16)})
ADMISSION_NAME = "engine_admission.json"


def admission_path() -> Path:
    """The yardstick's verdicts `auto` reads (`wam-diff2-bench agreement --admit` writes them), in the user's cache
    (core/cache.py): they belong to this machine's device; absent, nothing is admitted."""
    return user_cache_root() / ADMISSION_NAME


FUSED_DEVICES = ("cuda",)  # where `auto` may pick an admitted fused engine


def admitted(engine: str, device: torch.device, dtype: torch.dtype, admission_file: Path | None = None) -> bool:
    """Whether the yardstick's report at `admission_file` (default `admission_path()`) admits `engine` on this
    device type and dtype (an unreadable report admits nothing, with a log line)."""
    path = admission_path() if admission_file is None else admission_file
    if not path.is_file():
        return False
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        verdict = report["verdicts"].get(engine, {})
        same_place = report["device"] == device.type and report["dtype"] == str(dtype).removeprefix("torch.")
        return bool(same_place and verdict.get("admitted") is True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        LOG.warning("engine admission file %s unreadable (%s): no engine admitted", path, exc)
        return False


def resolve_engine(
    engine: str,
    device: torch.device,
    dtype: torch.dtype,
    admission_file: Path | None = None,
) -> str:
    """`exact`, `fast` or `fused` for a configured engine (see the module docstring)."""
    if engine == "auto":
        if device.type in FUSED_DEVICES and admitted("fused", device, dtype, admission_file):
            return "fused"
        engine = "fast" if (device.type, dtype) in FAST_BY_DEFAULT else "exact"
    return engine


def describe_engine(
    engine: str,
    device: torch.device,
    dtype: torch.dtype,
    admission_file: Path | None = None,
) -> str:
    """Which engine a configured `engine` runs on this device and dtype, and why (one line for logs)."""
    chosen = resolve_engine(engine, device, dtype, admission_file)
    if engine != "auto":
        return f"{chosen} (decoding.engine: {engine})"
    where = f"{device.type} {str(dtype).removeprefix('torch.')}"
    if chosen == "fused":
        return f"fused (auto: admitted by the agreement yardstick on {where})"
    if chosen == "fast":
        return f"fast (auto: shown token-identical to exact on {where})"
    return f"exact (auto: the fast engine was never shown token-identical on {where}; decoding.engine: fast forces it)"


class Runners:
    """The runners of one backbone, kept across decodes so that the fast engine's kernels, CUDA graphs and fused
    ops are built once; `select` is the one place where a configured engine becomes a runner."""

    def __init__(self, backbone: BlockDiffusionBackbone) -> None:
        self.backbone = backbone
        self._fast: dict[tuple[bool, bool, bool], FastRunner] = {}

    def select(
        self,
        engine: str,
        cuda_graphs: bool = True,
        triton_kernels: bool = False,
        device: torch.device | None = None,
    ) -> Runner:
        """The runner for a configured engine on `device` (default: the backbone's) and the backbone's dtype
        (`resolve_engine`). `triton_kernels`: the fast engine's bit-identical Triton kernels (CUDA with Triton
        only; off by default)."""
        chosen = resolve_engine(engine, device or self.backbone.device, self.backbone.dtype)
        if chosen == "exact":
            return ExactRunner(self.backbone)  # holds only the decode's cache: nothing to keep
        key = (cuda_graphs, chosen == "fused", triton_kernels)
        runner = self._fast.get(key)
        if runner is None:
            runner = self._fast[key] = FastRunner(
                self.backbone, cuda_graphs=cuda_graphs, fused=key[1], triton_kernels=triton_kernels
            )
        return runner

    def fast_runners(self) -> dict[tuple[bool, bool, bool], Any]:
        """The fast runners built so far, by (cuda_graphs, fused, triton_kernels) (for instruments and tests)."""
        return dict(self._fast)
