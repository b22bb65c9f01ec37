"""The fused engine's step kernels (`engine: fused`): fewer, larger GPU kernels.

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
README).

Nothing of transformers is replaced: building a `FusedStepOps` swaps the text model's RMSNorms, MLPs and attention
layers for this module's own types (`StepNorm`, `StepMLP`, `StepAttention`: the same parameters and children under
the same names, so the state dict is unchanged), and selects the attention function registered through
transformers' public `AttentionInterface` as `STEP_ATTENTION` (`attn_implementation` of the text model). Each of
them runs the stock computation (the stock class's own forward, `sdpa`) unless the calling context (thread) is
inside `FusedStepOps.installed()`: another decode at the same time, prefill and the exact engine are not
affected. Where `torch.compile` fails (no compiler, no Triton), the stock computation runs and one line is logged;
under a Python dispatch mode (the benchmark's op counter) the plain chains run. Meant for CUDA: on CPU the
fast engine's exact kernels are faster than the compiled chains' call overhead saves.

A set of Triton kernels (`triton_kernels.StepKernels`) replaces the chains it has: the fused engine's split-KV
attention on CUDA (`triton_kernels.FUSED`), or, with `compile_chains=False`, the fast engine's bit-identical
element-wise kernels (`triton_kernels.EXACT`) with everything else stock.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

LOG = logging.getLogger(__name__)

SILU_MODULES = ("SiLU", "SiLUActivation")  # torch's and transformers' SiLU modules (the checkpoint's hidden_act)
STEP_ATTENTION = "wam_fused"  # the attention implementation registered here (`attn_implementation`)
STOCK_ATTENTION = "sdpa"  # what it runs outside a step: the implementation the checkpoint loader chooses

MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))  # what `nn.Module` keeps per instance (hooks, children, ...)

_ACTIVE: contextvars.ContextVar[FusedStepOps | None] = contextvars.ContextVar("active_fused_step_ops", default=None)
_STOCK_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("fused_stock_only", default=False)


@contextlib.contextmanager
def stock_chains() -> Iterator[None]:
    """Within: every fused chain runs its stock computation (for an aten op counter: a Triton kernel or a
    compiled chain is no aten op, and dynamo cannot trace under a Python dispatch mode)."""
    token = _STOCK_ONLY.set(True)
    try:
        yield
    finally:
        _STOCK_ONLY.reset(token)


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


def step_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The attention function registered as `STEP_ATTENTION` (transformers' attention-function interface): inside
    `FusedStepOps.installed()` the installed ops' attention for a mask shared by the heads, else the stock one."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ops = _ACTIVE.get()
    shared_mask = attention_mask is not None and attention_mask.shape[1] == 1
    if ops is None or ops.attention is None or not shared_mask or dropout or query.shape[1] % key.shape[1]:
        stock = ALL_ATTENTION_FUNCTIONS[STOCK_ATTENTION]
        return stock(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    assert attention_mask is not None
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    return ops.attention(query, key, value, attention_mask[..., : key.shape[2]], scale), None


class StepModule(torch.nn.Module):
    """An own module type standing in for a stock transformers module: its parameters, buffers, children and plain
    attributes under the same names (the state dict is unchanged); `stock_forward` is the stock class's forward
    run on it, what it computes outside a fused step."""

    def __init__(self, stock: torch.nn.Module) -> None:
        super().__init__()
        self.stock_type = type(stock)
        for name, parameter in stock.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        for name, buffer in stock.named_buffers(recurse=False):
            self.register_buffer(name, buffer)
        for name, child in stock.named_children():
            self.add_module(name, child)
        for name, value in vars(stock).items():
            if name not in MODULE_INTERNALS:  # its own attributes (transformers' private ones included)
                setattr(self, name, value)
        self.train(stock.training)

    def stock_forward(self, *args: Any, **kwargs: Any) -> Any:
        """The stock module's computation (its class's forward on these parameters and children)."""
        return self.stock_type.forward(self, *args, **kwargs)


class StepNorm(StepModule):
    """An RMSNorm: the installed ops' `rms_norm` chain inside a fused step, else the stock forward."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        ops = _ACTIVE.get()
        if ops is None or ops.norm is None:
            return self.stock_forward(hidden)
        return ops.norm(hidden, self.weight, self.variance_epsilon)


class StepMLP(StepModule):
    """A gated MLP: the installed ops' `silu_gate` chain between its projections inside a fused step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = _ACTIVE.get()
        if ops is None or ops.gate is None:
            return self.stock_forward(x)
        return self.down_proj(ops.gate(self.gate_proj(x), self.up_proj(x)))


class StepAttention(StepModule):
    """A Qwen3-VL text attention layer: inside a fused step the stock layer's computation with the installed ops'
    rotary embedding, on the fast engine's cache (`fast.StaticKVCache`), the attention through `step_attention`."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Any]:
        ops = _ACTIVE.get()
        if ops is None or ops.rotary is None:
            return self.stock_forward(hidden_states, position_embeddings, attention_mask, **kwargs)
        input_shape = hidden_states.shape[:-1]
        heads = (*input_shape, -1, self.head_dim)
        query = self.q_norm(self.q_proj(hidden_states).view(heads)).transpose(1, 2)
        key = self.k_norm(self.k_proj(hidden_states).view(heads)).transpose(1, 2)
        value = self.v_proj(hidden_states).view(heads).transpose(1, 2)
        query, key = ops.rotary(query, key, *position_embeddings)
        cache = kwargs.pop("cache", None) or kwargs.pop("past_key_values", None)  # its keyword in 5.x / 4.57
        kwargs.pop("cache_position", None)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        output, weights = step_attention(self, query, key, value, attention_mask, scaling=self.scaling, **kwargs)
        return self.o_proj(output.reshape(*input_shape, -1).contiguous()), weights


def _is_norm(module: torch.nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon")


def _is_gated_mlp(module: torch.nn.Module) -> bool:
    parts = ("gate_proj", "up_proj", "down_proj", "act_fn")
    # `silu_gate` computes SiLU: only MLPs whose activation is SiLU
    return all(hasattr(module, n) for n in parts) and type(module.act_fn).__name__ in SILU_MODULES


def _is_attention(module: torch.nn.Module) -> bool:
    return all(hasattr(module, n) for n in ("q_norm", "k_proj", "o_proj", "head_dim", "layer_idx", "scaling"))


STEP_TYPES: tuple[tuple[Callable[[torch.nn.Module], bool], type[StepModule]], ...] = (
    (_is_norm, StepNorm),
    (_is_gated_mlp, StepMLP),
    (_is_attention, StepAttention),
)


def install_step_modules(language_model: torch.nn.Module) -> None:
    """Swap the text model's norms, MLPs and attention layers for the step module types (once; they compute the
    stock values outside a fused step) and select `STEP_ATTENTION` for it through transformers' public
    `AttentionInterface` and `set_attn_implementation`."""
    from transformers import AttentionInterface

    AttentionInterface.register(STEP_ATTENTION, step_attention)
    for parent in reversed(list(language_model.modules())):  # children first: a step module adopts swapped ones
        for name, child in list(parent.named_children()):
            if isinstance(child, StepModule):
                continue
            step_type = next((kind for matches, kind in STEP_TYPES if matches(child)), None)
            if step_type is not None:
                setattr(parent, name, step_type(child))
    language_model.set_attn_implementation(STEP_ATTENTION)


class FusedStepOps:
    """The text model's RMSNorms, rotary embedding, MLP gates and attention, each as one compiled kernel (or a
    Triton set's kernel) inside `installed()`."""

    def __init__(self, language_model: torch.nn.Module, triton: Any = None, compile_chains: bool = True) -> None:
        install_step_modules(language_model)
        modules = list(language_model.modules())
        self.norms = [m for m in modules if isinstance(m, StepNorm)]
        self.mlps = [m for m in modules if isinstance(m, StepMLP)]
        self.attentions = [m for m in modules if isinstance(m, StepAttention)]
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
        self.norm = chain("rms_norm", rms_norm)
        self.gate = chain("silu_gate", silu_gate)

    def _compiled(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` compiled (lazily, on first call) and guarded (see `_guarded`)."""
        # round where eager rounds (bf16 intermediates); an option this torch lacks fails the first call: stock
        options = {"emulate_precision_casts": True}
        compiled = self.compiled[name] = torch.compile(function, fullgraph=True, options=options)
        return self._guarded(f"torch.compile of {name}", compiled, function)

    def _guarded(self, label: str, kernel: Callable[..., Any], function: Callable[..., Any]) -> Callable[..., Any]:
        """`kernel` that falls back to `function`, for good, when it fails (no compiler, no Triton, an unsupported
        op), and within :func:`stock_chains`."""

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.failed or _STOCK_ONLY.get():
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
        """Within (this context only): the step modules run these ops."""
        active = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(active)
