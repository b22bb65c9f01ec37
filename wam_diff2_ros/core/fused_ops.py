"""Opt-in fused kernels for the fast engine's step (`DecodeConfig.torch_compile`): fewer, larger GPU kernels.

With CUDA graphs a 2B denoising step is bound by its ~1,300 small kernels, not by its matrix products: every
RMSNorm is eight element-wise kernels in eager PyTorch, the rotary embedding ten, the SiLU gate two. Here
`torch.compile` turns each of these chains into one kernel (the matrix products and the attention stay the
stock modules'). The chains are installed around the fast engine's step and commit forwards only
(`FusedStepOps.installed`; prefill and vision keep the stock modules) and are captured into the step's CUDA
graph like the rest.

Not bit-identical: a fused kernel may sum the RMSNorm's squares in another order and keep intermediate values
in float32, so the logits can differ in the last bits and a token can differ from the exact engine's. The
option is off by default; the agreement with the exact engine is measured (scripts/engine_agreement.py,
README). Where `torch.compile` fails (no compiler, no Triton), the stock modules run and one line is logged;
under a Python dispatch mode (the benchmark's op counter) the plain chains run. Meant for CUDA: on CPU the
fast engine's exact kernels are faster than the compiled chains' call overhead saves.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

LOG = logging.getLogger(__name__)

ROTARY_FUNCTION = "apply_rotary_pos_emb"  # the module-level function transformers' Qwen3-VL attention calls


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3-VL's RMSNorm: normalise in float32, round to the input dtype, then scale."""
    dtype = hidden.dtype
    wide = hidden.to(torch.float32)
    wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return weight * wide.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary embedding of queries and keys [B, H, L, D] with cos/sin [B, L, D]."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def silu_gate(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The MLP's gated activation silu(gate) * up."""
    return torch.nn.functional.silu(gate) * up


class FusedStepOps:
    """The text model's RMSNorms, rotary embedding and MLP gates, each as one compiled kernel while installed."""

    def __init__(self, language_model: torch.nn.Module) -> None:
        modules = list(language_model.modules())
        self.norms = [m for m in modules if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon")]
        self.mlps = [m for m in modules if all(hasattr(m, n) for n in ("gate_proj", "up_proj", "down_proj"))]
        attention = next((m for m in modules if hasattr(m, "q_norm") and hasattr(m, "k_proj")), None)
        self.rotary_home = sys.modules[type(attention).__module__] if attention is not None else None
        self.failed = False
        self.compiled: dict[str, Callable[..., Any]] = {}

    def _compiled(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` compiled once (falls back to it, for good, when compiling or running the compiled one fails)."""
        compiled = self.compiled.get(name)
        if compiled is None:
            import torch._inductor.config as inductor_config

            options = {}
            if hasattr(inductor_config, "emulate_precision_casts"):
                options["emulate_precision_casts"] = True  # round where eager rounds (bf16 intermediates)
            compiled = self.compiled[name] = torch.compile(function, fullgraph=True, options=options)

        def guarded(*args: Any) -> Any:
            if self.failed or _get_current_dispatch_mode() is not None:  # dynamo cannot trace under a dispatch mode
                return function(*args)
            try:
                return compiled(*args)
            except Exception as exc:  # no compiler/Triton, unsupported op: the stock computation from now on
                LOG.warning("torch.compile of the step's fused ops failed (%s); the stock modules run", exc)
                self.failed = True
                return function(*args)

        return guarded

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Within: the text model's forwards use the compiled chains; the stock modules are restored after."""
        norm = self._compiled("rms_norm", rms_norm)
        gate = self._compiled("silu_gate", silu_gate)
        for module in self.norms:
            module.forward = functools.partial(_norm_forward, norm, module)
        for module in self.mlps:
            module.forward = functools.partial(_mlp_forward, gate, module)
        stock_rotary = None
        if self.rotary_home is not None and hasattr(self.rotary_home, ROTARY_FUNCTION):
            stock_rotary = getattr(self.rotary_home, ROTARY_FUNCTION)
            setattr(self.rotary_home, ROTARY_FUNCTION, self._compiled("rotary", rotary))
        try:
            yield
        finally:
            for module in self.norms + self.mlps:
                del module.forward
            if stock_rotary is not None:
                setattr(self.rotary_home, ROTARY_FUNCTION, stock_rotary)


def _norm_forward(norm: Callable[..., torch.Tensor], module: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    return norm(hidden, module.weight, module.variance_epsilon)


def _mlp_forward(gate: Callable[..., torch.Tensor], module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module.down_proj(gate(module.gate_proj(x), module.up_proj(x)))
