"""The fast engine: how block-diffusion steps execute, not what they compute (the rules live in decoding.py).

- `StaticKVCache`: per layer one key and one value buffer for prompt + every response block, allocated once
  per plan (or once per capacity bucket with CUDA graphs). A forward writes its keys/values at explicit
  positions (`index_copy_`, so the positions can live on the device) and attends to `[0, attend)`: a
  denoising step writes the block's own slots, the next step or the commit overwrites them; nothing is
  concatenated, cropped or reallocated. It implements the part of transformers' `Cache` interface that the
  Qwen3-VL attention uses (`update`, `get_seq_length`) in 4.57 and 5.x; the stock `StaticCache` of 5.x
  ignores `cache_position`, so it cannot write a block at its own slots.
- Logits only where read: none for the prompt or the commit pass; on CPU (float32) the output layer runs on
  the still-masked rows only (`BlockDiffusionBackbone.row_logits`) and the text layers' projections on the
  block through `block_kernels`: cpu_kernels.py, kernels that give every output the bits the exact
  engine's stock modules give it, probed on first use; where they are unavailable the stock modules run.
- One device->host read per step (`open_rows`; on CPU the `nonzero` that also gives the masked rows).
- CUDA graphs (CUDA only, `cuda_graphs`): the block forward + output layer is captured once per (batch,
  block size, capacity bucket of 256 tokens) and replayed for every denoising step and for the commit (whose
  logits go unread); the attention then spans the whole bucket with the unused slots masked out, which
  changes the reduction length, so identical tokens are not guaranteed there in principle (measured
  identical on an H200: README). Capture failures fall back to eager steps with a log line.
- The `fused` engine (`fused=True`, fused.py): the step's norms, rotary embedding and MLP gates
  compiled into one kernel each and a grouped-query attention without `repeat_kv`, in eager steps and in the
  graphs; on CUDA with Triton, the attention is a split-KV kernel over the static cache and greedy proposals
  take a fused argmax + maximum probability over the output layer (triton_kernels.py). Not bit-identical:
  admitted by the agreement yardstick (docs/engine.md).
- `triton_kernels=True` (CUDA with Triton; off by default): the fast engine's RMSNorm tails, rotary embedding
  and SiLU gates as Triton kernels that keep eager's rounding points (bit-identical to eager on CPU under the
  Triton interpreter; on a GPU still to be proven by test_fast_decoding_cuda.py).

Everything a runner needs across decodes (the CPU kernels, the CUDA graph store, the fused ops) is its own;
`selection.Runners` keeps runners per backbone, so it is built once.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from ..model import BlockDiffusionBackbone
from . import triton_kernels
from .cpu_kernels import ExactLinears, ExactRowLogits
from .fused import FusedStepOps
from .runners import ALL_ROWS, AllRows, OpenRows
from .sampling import RowSampling, SamplingParams, draw_uniform, sample_batch, sample_flat, sample_tokens

LOG = logging.getLogger(__name__)

CAPACITY_QUANTUM = 256  # CUDA graph cache buckets: capacity rounded up to a multiple of this
KEPT_BUCKETS = 4  # (batch, capacity bucket) caches kept with their graphs; the least recently used goes first


class StaticKVCache:
    """Preallocated keys/values per layer, written at explicit positions; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.write_positions: torch.Tensor | None = None  # [L] slots the next forward writes
        self.start = 0  # host copy of the first written slot (what transformers asks as "seq length")
        self.attend = 0  # the forward attends to slots [0, attend)

    def place(self, start: int, length: int, attend: int | None = None) -> None:
        """Make the next forward write slots [start, start + length) and attend to [0, attend or the end)."""
        device = self.keys[0].device if self.keys else None
        self.write_positions = torch.arange(start, start + length, device=device)
        self.start = start
        self.attend = start + length if attend is None else attend

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write a layer's new keys/values [B, H, L, D] at `write_positions`; return the attended views."""
        if layer_idx == len(self.keys):
            batch, heads, _, head_dim = key_states.shape
            shape = (batch, heads, self.capacity, head_dim)
            self.keys.append(torch.zeros(shape, dtype=key_states.dtype, device=key_states.device))
            self.values.append(torch.zeros(shape, dtype=value_states.dtype, device=value_states.device))
        positions = self.write_positions
        if positions is None or positions.device != key_states.device:
            positions = torch.arange(self.start, self.start + key_states.shape[2], device=key_states.device)
            self.write_positions = positions
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys.index_copy_(2, positions, key_states)
        values.index_copy_(2, positions, value_states)
        return keys[:, :, : self.attend], values[:, :, : self.attend]

    def fill_rows(self, source: StaticKVCache, rows: int, length: int) -> None:
        """Slots [0, length) of every one of `rows` rows := those of `source`'s one row (allocating as needed)."""
        for layer, (keys, values) in enumerate(zip(source.keys, source.values, strict=True)):
            if layer == len(self.keys):
                _, heads, _, head_dim = keys.shape
                shape = (rows, heads, self.capacity, head_dim)
                self.keys.append(torch.zeros(shape, dtype=keys.dtype, device=keys.device))
                self.values.append(torch.zeros(shape, dtype=values.dtype, device=values.device))
            self.keys[layer][:, :, :length].copy_(keys[:1, :, :length].expand(rows, -1, -1, -1))
            self.values[layer][:, :, :length].copy_(values[:1, :, :length].expand(rows, -1, -1, -1))

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        """Slots before the ones being written (transformers only uses it when no positions are given)."""
        return self.start


def capacity_bucket(tokens: int, quantum: int = CAPACITY_QUANTUM) -> int:
    """Cache capacity for CUDA graphs: `tokens` rounded up to a multiple of `quantum`."""
    return -(-tokens // quantum) * quantum


class FastRunner:
    """Executes the decoder's steps on a static cache (a `runners.Runner`); keeps its kernels, graphs and fused ops
    across decodes (`selection.Runners` holds one per backbone and option set)."""

    def __init__(
        self,
        backbone: BlockDiffusionBackbone,
        cuda_graphs: bool = True,
        fused: bool = False,
        triton_kernels: bool = False,
    ) -> None:
        self.backbone = backbone
        self.fused = fused
        self.device = backbone.device
        self.masked_rows_only = self.device.type == "cpu"  # fixed shapes elsewhere (weights-bound layer, graphs)
        # Triton only where it compiles for the device (CUDA), or under its CPU interpreter (tests)
        triton_here = triton_kernels_available(self.device)
        self.triton_exact = triton_kernels and triton_here  # tier 1: bit-identical element-wise kernels
        self.triton_fused = fused and triton_here  # tier 2: split-KV attention, fused argmax + probability
        self.graphs: CudaGraphSteps | None = None
        if cuda_graphs and self.device.type == "cuda":
            self.graphs = CudaGraphSteps()
        self.cache: StaticKVCache | None = None
        self._row_logits: ExactRowLogits | None = None
        self._linears: ExactLinears | None = None
        self._step_ops: FusedStepOps | None = None

    def prefill(self, input_ids, prompt_mask, positions, pixel_values, image_grid_thw, capacity: int) -> float:
        """Fill a static cache sized for the whole plan with the prompt; returns the vision seconds."""
        batch, prompt_len = input_ids.shape
        if self.graphs is not None and self.graphs.enabled:
            self.cache = self.graphs.cache_for(batch, capacity)
        else:
            self.cache = StaticKVCache(capacity)
        self.cache.place(0, prompt_len)
        result = self.backbone.prefill(
            input_ids, prompt_mask, positions, pixel_values, image_grid_thw, cache=self.cache
        )
        return result.vision_seconds

    def open_rows(self, masked: torch.Tensor) -> OpenRows | None:
        """None when nothing is masked, else the flat indices of masked rows (CPU) or `ALL_ROWS`; one read."""
        if not self.masked_rows_only:
            return ALL_ROWS if masked.any() else None
        rows = masked.reshape(-1).nonzero().squeeze(1)  # the step's one device->host read
        return rows if rows.numel() else None

    def row_logits(self, rows: torch.Tensor, block_shape: tuple[int, int]) -> torch.Tensor | None:
        """Logits [N, V] of hidden rows [N, D] of a [B, L] block with the bits the output layer gives them in the
        whole block, at a cost that follows N (float32 CPU: `cpu_kernels.ExactRowLogits`); None where not available.
        """
        if self.device.type != "cpu":
            return None
        if self._row_logits is None:
            self._row_logits = ExactRowLogits(self.backbone.model.lm_head)
        return self._row_logits(rows, block_shape)

    def block_kernels(self, block_shape: tuple[int, int]) -> contextlib.AbstractContextManager[Any]:
        """Within: the text layers' projections compute a [B, L] block's rows with the bits they have anyway, on
        CPU through `cpu_kernels.ExactLinears` (float32); elsewhere this changes nothing."""
        if self.device.type != "cpu":
            return contextlib.nullcontext()
        if self._linears is None:
            self._linears = ExactLinears(self.backbone.model.model.language_model.layers)
        return self._linears.installed(block_shape)

    def step_ops(self) -> contextlib.AbstractContextManager[Any]:
        """The replaced step kernels around a step's forward (`fused`, or the tier-1 Triton kernels), else nothing."""
        if not (self.fused or self.triton_exact):
            return contextlib.nullcontext()
        if self._step_ops is None:
            language_model = self.backbone.model.model.language_model
            if self.fused:
                kernels = triton_kernels.FUSED if self.triton_fused else None
                self._step_ops = FusedStepOps(language_model, triton=kernels)
            else:
                self._step_ops = FusedStepOps(language_model, triton=triton_kernels.EXACT, compile_chains=False)
        return self._step_ops.installed()

    @property
    def fused_ops(self) -> FusedStepOps | None:
        """The step ops built so far (None before the first fused step)."""
        return self._step_ops

    def _replayed(self, tokens, positions, block_start: int) -> torch.Tensor | None:
        """The block step's logits from its CUDA graph, or None when the step must run eagerly."""
        if self.graphs is None or not self.graphs.enabled:
            return None
        assert self.cache is not None
        return self.graphs.run(self.cache, tokens, positions, block_start, self)

    def _block_logits(self, tokens, positions, mask, block_start: int) -> torch.Tensor:
        assert self.cache is not None
        logits = self._replayed(tokens, positions, block_start)
        if logits is not None:
            return logits
        return self.backbone.output_logits(self._hidden(tokens, positions, mask, block_start))

    def _hidden(self, tokens, positions, mask, block_start: int) -> torch.Tensor:
        """The block's last hidden states from an eager forward writing its slots (CPU kernels where they apply)."""
        assert self.cache is not None
        self.cache.place(block_start, tokens.shape[1])
        with self.block_kernels(tuple(tokens.shape)), self.step_ops():
            return self.backbone.step_hidden(tokens, positions, mask, self.cache)

    def bucket_step(self, tokens, positions, mask, cache: StaticKVCache) -> torch.Tensor:
        """What a CUDA graph holds: the block forward on `cache` as placed, with the step ops, then the logits."""
        with self.step_ops():
            hidden = self.backbone.step_hidden(tokens, positions, mask, cache)
        return self.backbone.output_logits(hidden)

    def _sample(self, logits: torch.Tensor, sampling: SamplingParams, uniform) -> tuple[torch.Tensor, torch.Tensor]:
        if self.triton_fused and sampling.temperature == 0:  # tier 2: one pass over the logits (not bit-identical)
            return triton_kernels.argmax_probability(logits)
        return sample_batch(logits, sampling, uniform=uniform)

    def propose(self, tokens, positions, mask, block_start: int, rows: OpenRows, sampling: SamplingParams, generator):
        """Per position a proposal and its probability; on CPU the output layer runs on masked rows only."""
        batch, length = tokens.shape
        total = batch * length
        uniform = None
        if sampling.temperature != 0:  # one draw per position, as the exact path, whatever rows are computed
            uniform = draw_uniform(total, self.backbone.dtype, self.device, generator)
        if isinstance(rows, AllRows):
            return self._sample(self._block_logits(tokens, positions, mask, block_start), sampling, uniform)
        hidden = self._hidden(tokens, positions, mask, block_start)
        flat = hidden.reshape(total, -1)
        picked = flat if rows.numel() == total else flat.index_select(0, rows)
        logits = self.row_logits(picked, (batch, length))
        if logits is None:  # no exact row kernel here: every row, as the exact engine computes them
            return self._sample(self.backbone.output_logits(hidden), sampling, uniform)
        chosen = None if uniform is None else uniform.index_select(0, rows)
        if isinstance(sampling, RowSampling):  # candidate rows: each at its own temperature
            sampled, probs = sample_flat(logits, (rows // length).tolist(), sampling, chosen)
        else:
            sampled, probs = sample_tokens(
                logits.unsqueeze(0), sampling.temperature, sampling.top_k, sampling.top_p, uniform=chosen
            )
        proposal = tokens.reshape(-1).index_copy(0, rows, sampled.reshape(-1).to(tokens.dtype))
        confidence = torch.zeros(total, dtype=probs.dtype, device=probs.device).index_copy_(0, rows, probs.reshape(-1))
        return proposal.view(batch, length), confidence.view(batch, length)

    def expand(self, rows: int, prompt_len: int) -> None:
        """Broadcast the one-row prompt cache to `rows` rows: a cache for the batch (with CUDA graphs the bucket's)
        whose first `prompt_len` slots are the prompt's keys/values in every row."""
        assert self.cache is not None
        source = self.cache
        if self.graphs is not None and self.graphs.enabled:
            self.cache = self.graphs.cache_for(rows, source.capacity)
        else:
            self.cache = StaticKVCache(source.capacity)
        self.cache.fill_rows(source, rows, prompt_len)

    def commit(self, tokens, positions, mask, block_start: int) -> None:
        """Write a finished block into its slots (no output layer; with CUDA graphs: the step's replay)."""
        assert self.cache is not None
        # the captured step writes the block's keys/values exactly as a commit does; its logits go unread
        if self._replayed(tokens, positions, block_start) is not None:
            return
        self._hidden(tokens, positions, mask, block_start)


def triton_kernels_available(device: torch.device) -> bool:
    """Whether the engines use the Triton kernels on `device`: CUDA with Triton (not interpreted); on the CPU
    only under the interpreter when `triton_kernels.ENGINES_ON_INTERPRETER` is set (tests of the wiring)."""
    if triton_kernels.interpreted():
        return triton_kernels.ENGINES_ON_INTERPRETER and triton_kernels.available()
    return device.type == "cuda" and triton_kernels.available()  # no Triton import for a CPU engine


class CudaGraphSteps:
    """Captured denoising forwards (block forward + output layer) of one runner per (batch, block, capacity bucket).

    `capture=False` runs the very computation a graph would hold eagerly, on any device: the step over the
    whole bucket with the slots past the block masked out (what CPU tests check against the exact engine).
    """

    def __init__(self, capture: bool = True, kept_buckets: int = KEPT_BUCKETS) -> None:
        self.enabled = True
        self.capture = capture
        self.kept_buckets = kept_buckets
        self.caches: dict[tuple[int, int], StaticKVCache] = {}  # in order of last use
        self.graphs: dict[tuple[int, int, int], dict[str, Any]] = {}

    def cache_for(self, batch: int, capacity: int) -> StaticKVCache:
        """The persistent cache of a bucket (graphs hold its addresses). Only the `kept_buckets` most recently
        used buckets keep their cache and graphs, so varied batch sizes and prompt lengths (batch inference)
        do not pile up device memory; a bucket used again after that is captured again."""
        key = (batch, capacity_bucket(capacity))
        cache = self.caches.pop(key, None)
        if cache is None:
            cache = StaticKVCache(key[1])
        self.caches[key] = cache  # now the most recently used
        while len(self.caches) > self.kept_buckets:
            old_batch, old_capacity = next(iter(self.caches))
            del self.caches[(old_batch, old_capacity)]
            for graph_key in [k for k in self.graphs if k[0] == old_batch and k[2] == old_capacity]:
                del self.graphs[graph_key]
        return cache

    def run(self, cache: StaticKVCache, tokens, positions, block_start: int, runner: FastRunner) -> torch.Tensor | None:
        """Replay (capturing on first use) `runner`'s step for this shape; None (eager fallback) if capture fails."""
        batch, length = tokens.shape
        key = (batch, length, cache.capacity)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self._static_inputs(cache, tokens, positions, block_start)
            if self.capture:
                try:
                    self._capture(entry, cache, block_start, runner)
                except Exception as exc:  # any capture failure: run eagerly from now on
                    LOG.warning("CUDA graph capture failed (%s); fast engine continues without graphs", exc)
                    self.enabled = False
                    return None
            self.graphs[key] = entry
        self._load(entry, tokens, positions, block_start)
        if not self.capture:
            return self._bucket_step(entry, cache, block_start, runner)
        entry["graph"].replay()
        return entry["logits"]

    @staticmethod
    def _static_inputs(cache: StaticKVCache, tokens, positions, block_start: int) -> dict[str, Any]:
        """The buffers a graph reads (their addresses are recorded; each step copies its inputs into them)."""
        batch, length = tokens.shape
        device = tokens.device
        slots = torch.arange(cache.capacity, device=device)
        return {
            "tokens": tokens.clone(),
            "positions": positions.clone(),
            "write": torch.arange(block_start, block_start + length, device=device),
            "slots": slots,
            "mask": (slots < block_start + length).view(1, 1, 1, -1).expand(batch, 1, length, -1).contiguous(),
        }

    @staticmethod
    def _load(entry: dict[str, Any], tokens, positions, block_start: int) -> None:
        length = tokens.shape[1]
        entry["tokens"].copy_(tokens)
        entry["positions"].copy_(positions)
        entry["write"].copy_(torch.arange(block_start, block_start + length, device=tokens.device))
        entry["mask"].copy_(entry["slots"] < block_start + length)

    @staticmethod
    def _bucket_step(entry: dict[str, Any], cache: StaticKVCache, block_start: int, runner: FastRunner) -> torch.Tensor:
        """What a graph holds: the block forward attending over the whole bucket (masked), then the logits."""
        cache.write_positions = entry["write"]
        cache.start, cache.attend = block_start, cache.capacity
        return runner.bucket_step(entry["tokens"], entry["positions"], entry["mask"], cache)

    def _capture(self, entry: dict[str, Any], cache: StaticKVCache, block_start: int, runner: FastRunner) -> None:
        device = entry["tokens"].device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up outside the graph (allocator, lazy inits)
                self._bucket_step(entry, cache, block_start, runner)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            entry["logits"] = self._bucket_step(entry, cache, block_start, runner)
        entry["graph"] = graph
