"""The fused engine's step kernels (`engine: fused`; `DecodeConfig.torch_compile`): fewer, larger GPU kernels.

With CUDA graphs a 2B denoising step is bound by its ~1,800 small kernels, not by its matrix products (H200,
2026-12-04, wam-diff2-bench profile-gpu-step): every RMSNorm is eight element-wise kernels in eager PyTorch, the rotary
embedding ten, the SiLU gate two, and the attention copies the shared key/value heads once per query head
(`repeat_kv`) before a masked SDPA kernel that runs one thread block per head. Here `torch.compile` turns each
chain into one kernel, and the attention becomes `grouped_attention`: matrix products in which each key/value
head's query heads are stacked as rows (no copies of the cache), a float32 masked softmax between them. The
matrix products of the layers stay the stock modules'. All of it is installed around the fast engine's step
and commit forwards only (`FusedStepOps.installed`; prefill and vision keep the stock modules) and is captured
into the step's CUDA graph like the rest.

Not bit-identical: a fused kernel may sum the RMSNorm's squares in another order, keep intermediate values in
float32 and normalise the attention weights before rounding them, so the logits can differ in the last bits
and a token can differ from the exact engine's. The
option is off by default; the agreement with the exact engine is measured (`wam-diff2-bench agreement`,
README). The norms and MLPs are routed per module instance; the rotary function and the `sdpa` attention
entry are module-level in transformers, so while any `FusedStepOps` is installed they are replaced by routes
that serve the fused versions only to the context (thread) that installed them and the stock ones to every
other caller: another engine decoding at the same time is not affected. Where `torch.compile` fails (no
compiler, no Triton), the stock modules run and one line is logged;
under a Python dispatch mode (the benchmark's op counter) the plain chains run. Meant for CUDA: on CPU the
fast engine's exact kernels are faster than the compiled chains' call overhead saves.

A set of Triton kernels (`triton_kernels.StepKernels`) replaces the chains it has: the fused engine's split-KV
attention on CUDA (`triton_kernels.FUSED`), or, with `compile_chains=False`, the fast engine's bit-identical
element-wise kernels (`triton_kernels.EXACT`) with everything else stock.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

LOG = logging.getLogger(__name__)

ROTARY_FUNCTION = "apply_rotary_pos_emb"  # the module-level function transformers' Qwen3-VL attention calls
SILU_MODULES = ("SiLU", "SiLUActivation")  # torch's and transformers' SiLU modules (the checkpoint's hidden_act)
ATTENTION = "sdpa"  # the attention implementation the checkpoint loader chooses (core/checkpoint.py)

_ACTIVE: contextvars.ContextVar[FusedStepOps | None] = contextvars.ContextVar("active_fused_step_ops", default=None)


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


def grouped_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of query heads [B, Hq, L, D] on shared key/value heads [B, Hk, S, D] under a mask [B, 1, L, S]
    (boolean, True = attend, or additive): each key/value head's Hq / Hk query heads stacked as rows of one
    matrix product, scores and softmax in float32. Returns [B, L, Hq, D], as transformers' attention functions."""
    batch, query_heads, length, dim = query.shape
    kv_heads = key.shape[1]
    groups = query_heads // kv_heads
    rows = query.reshape(batch, kv_heads, groups * length, dim).float()
    scores = torch.matmul(rows, key.float().transpose(-1, -2)) * scale
    scores = scores.view(batch, kv_heads, groups, length, -1)
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask.unsqueeze(2), float("-inf"))
    else:
        scores = scores + mask.unsqueeze(2)
    weights = scores.softmax(-1).to(value.dtype).view(batch, kv_heads, groups * length, -1)
    output = torch.matmul(weights, value).view(batch, query_heads, length, dim)
    return output.transpose(1, 2).contiguous()


class FusedStepOps:
    """The text model's RMSNorms, rotary embedding and MLP gates, each as one compiled kernel while installed."""

    def __init__(self, language_model: torch.nn.Module, triton: Any = None, compile_chains: bool = True) -> None:
        modules = list(language_model.modules())
        self.norms = [m for m in modules if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon")]
        self.mlps = [m for m in modules if all(hasattr(m, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn"))]
        self.mlps = [m for m in self.mlps if type(m.act_fn).__name__ in SILU_MODULES]  # `silu_gate` computes SiLU
        attention = next((m for m in modules if hasattr(m, "q_norm") and hasattr(m, "k_proj")), None)
        self.rotary_home = sys.modules[type(attention).__module__] if attention is not None else None
        self.attention_functions = getattr(self.rotary_home, "ALL_ATTENTION_FUNCTIONS", None)
        self.failed = False
        self.compiled: dict[str, Callable[..., Any]] = {}

        def chain(name: str, function: Callable[..., Any]) -> Callable[..., Any] | None:
            """The Triton set's kernel for a chain, else the compiled chain (None: the stock module runs)."""
            kernel = getattr(triton, name, None)
            if kernel is not None:
                return self._guarded(f"Triton {name}", kernel, function)
            return self._compiled(function.__name__, function) if compile_chains else None

        self.rotary = chain("rotary", rotary)
        self.attention = chain("attention", grouped_attention)
        norm, gate = chain("rms_norm", rms_norm), chain("silu_gate", silu_gate)
        # the per-module forwards, built once: installing them is then only attribute assignments
        self.forwards = [(m, functools.partial(_norm_forward, norm, m)) for m in self.norms] if norm else []
        self.forwards += [(m, functools.partial(_mlp_forward, gate, m)) for m in self.mlps] if gate else []

    def _compiled(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` compiled (lazily, on first call) and guarded (see `_guarded`)."""
        import torch._inductor.config as inductor_config

        options = {}
        if hasattr(inductor_config, "emulate_precision_casts"):
            options["emulate_precision_casts"] = True  # round where eager rounds (bf16 intermediates)
        compiled = self.compiled[name] = torch.compile(function, fullgraph=True, options=options)
        return self._guarded(f"torch.compile of {name}", compiled, function)

    def _guarded(self, label: str, kernel: Callable[..., Any], function: Callable[..., Any]) -> Callable[..., Any]:
        """`kernel` that falls back to `function`, for good, when it fails (no compiler, no Triton, an unsupported
        op), and under a Python dispatch mode (dynamo cannot trace under one; the op counter counts the chain)."""

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.failed or _get_current_dispatch_mode() is not None:
                return function(*args, **kwargs)
            try:
                return kernel(*args, **kwargs)
            except Exception as exc:  # the stock computation from now on
                LOG.warning("%s in the step's fused ops failed (%s); the stock modules run", label, exc)
                self.failed = True
                return function(*args, **kwargs)

        return guarded

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Within: the text model's forwards use the compiled chains; the stock modules are restored after."""
        active = _ACTIVE.set(self)
        _MODULE_ROUTES.acquire(self.rotary_home, self.attention_functions)
        try:
            for module, forward in self.forwards:
                module.forward = forward
            yield
        finally:
            for module, _ in self.forwards:
                vars(module).pop("forward", None)
            _MODULE_ROUTES.release()
            _ACTIVE.reset(active)


class _ModuleRoutes:
    """The module-level hooks (transformers' rotary function, its `sdpa` attention entry) replaced by routes to
    the calling context's installed `FusedStepOps`, or to the stock functions, while any is installed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._restore: list[Callable[[], None]] = []
        self.stock_rotary: Callable[..., Any] | None = None
        self.stock_attention: Callable[..., Any] | None = None

    def acquire(self, home: Any, functions: Any) -> None:
        """Install the routes (on first use) into `home` (the Qwen3-VL modeling module) and `functions`."""
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
            if home is not None and hasattr(home, ROTARY_FUNCTION):
                self.stock_rotary = getattr(home, ROTARY_FUNCTION)
                setattr(home, ROTARY_FUNCTION, _route_rotary)
                self._restore.append(functools.partial(setattr, home, ROTARY_FUNCTION, self.stock_rotary))
            if functions is not None and ATTENTION in functions:
                local = functions._local_mapping.get(ATTENTION)  # an override of the stock entry, if any
                self.stock_attention = functions[ATTENTION]
                functions[ATTENTION] = _route_attention
                self._restore.append(functools.partial(_restore_entry, functions, local))

    def release(self) -> None:
        """Remove the routes when the last installed `FusedStepOps` is removed."""
        with self._lock:
            self._users -= 1
            if self._users == 0:
                while self._restore:
                    self._restore.pop()()


_MODULE_ROUTES = _ModuleRoutes()


def _restore_entry(functions: Any, local: Callable[..., Any] | None) -> None:
    if local is None:
        del functions[ATTENTION]
    else:
        functions[ATTENTION] = local


def _route_rotary(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    ops, stock = _ACTIVE.get(), _MODULE_ROUTES.stock_rotary
    assert stock is not None
    return stock(*args, **kwargs) if ops is None or ops.rotary is None else ops.rotary(*args, **kwargs)


def _route_attention(module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    ops, stock = _ACTIVE.get(), _MODULE_ROUTES.stock_attention
    assert stock is not None
    if ops is None or ops.attention is None:
        return stock(module, *args, **kwargs)
    return _attention_forward(ops.attention, stock, module, *args, **kwargs)


def _norm_forward(norm: Callable[..., torch.Tensor], module: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    return norm(hidden, module.weight, module.variance_epsilon)


def _mlp_forward(gate: Callable[..., torch.Tensor], module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module.down_proj(gate(module.gate_proj(x), module.up_proj(x)))


def _attention_forward(
    attend: Callable[..., torch.Tensor],
    stock: Callable[..., Any],
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface over `grouped_attention` (the stock function without a mask
    shared by the heads)."""
    if attention_mask is None or attention_mask.shape[1] != 1 or dropout or query.shape[1] % key.shape[1]:
        return stock(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    return attend(query, key, value, attention_mask[..., : key.shape[2]], scale), None
