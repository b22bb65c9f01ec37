"""The fast engine gives the exact engine's tokens and step counts (CPU, float32), with its own parts tested.

The exact engine is itself checked against a cache-free naive decoder in test_decoding.py; here every
decoding grid cell runs both engines on real transformers Qwen3-VL modules (tiny checkpoints and the demo
model) and compares token ids and per-block step counts.
"""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest
import torch
from core_helpers import can_build_row_kernel, noise_image, tiny_checkpoint

from wam_diff2_ros.bench.host_reads import count_host_reads
from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_model, load_processor
from wam_diff2_ros.core.engine import cpu_kernels
from wam_diff2_ros.core.engine.decoding import (
    DecodeCancelledError,
    DecodeConfig,
    DecodeConfigError,
    block_diffusion_decode,
    select_transfers,
)
from wam_diff2_ros.core.engine.fast import (
    CudaGraphSteps,
    FastRunner,
    StaticKVCache,
    capacity_bucket,
)
from wam_diff2_ros.core.engine.runners import ALL_ROWS, AllRows, ExactRunner
from wam_diff2_ros.core.engine.selection import Runners, describe_engine, resolve_engine
from wam_diff2_ros.core.model import BlockDiffusionBackbone
from wam_diff2_ros.core.prompts import build_messages

pytestmark = pytest.mark.core

STRATEGIES = ("low_confidence_dynamic", "low_confidence_static", "sequential")


# ------------------------------------------------------------------------------------------- parts


def per_sample_transfers(strategy, masked, confidence, count, threshold, finished):
    """The reference's remasking, one sample at a time with `torch.topk` per row."""
    transfer = torch.zeros_like(masked)
    for row in range(masked.shape[0]):
        open_positions = masked[row].nonzero(as_tuple=True)[0]
        if finished[row] or len(open_positions) == 0:
            continue
        scores = torch.where(masked[row], confidence[row], torch.tensor(-torch.inf, dtype=confidence.dtype))
        if strategy == "sequential":
            transfer[row, open_positions[:count]] = True
        elif strategy == "low_confidence_static":
            k = min(count, len(open_positions))
            if k > 0:
                transfer[row, torch.topk(scores, k).indices] = True
        else:
            confident = scores >= threshold
            if confident.any():
                transfer[row] = confident
            else:
                transfer[row, torch.topk(scores, 1).indices] = True
    return transfer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_batched_remasking_picks_what_the_per_sample_reference_picks(strategy, dtype):
    generator = torch.Generator().manual_seed(0)
    for trial in range(300):
        batch, length = 3, (4, 8, 32)[trial % 3]
        # few distinct values so that ties are common (as in bf16)
        confidence = (torch.randint(0, 6, (batch, length), generator=generator).to(dtype) / 6).to(dtype)
        masked = torch.rand(batch, length, generator=generator) < 0.6
        finished = torch.rand(batch, generator=generator) < 0.2
        count = int(torch.randint(0, length + 1, (1,), generator=generator))
        expected = per_sample_transfers(strategy, masked & ~finished[:, None], confidence, count, 0.8, finished)
        got = select_transfers(strategy, masked, confidence, count, 0.8, finished)
        assert torch.equal(got, expected), (trial, masked, confidence, count)


def test_static_cache_writes_at_explicit_positions_without_reallocating():
    cache = StaticKVCache(capacity=10)
    first = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)
    cache.place(0, 4)
    keys, values = cache.update(first, -first, layer_idx=0)
    assert keys.shape == (2, 3, 4, 5) and torch.equal(keys, first) and torch.equal(values, -first)
    pointer = cache.keys[0].data_ptr()
    block = torch.ones(2, 3, 2, 5)
    for step in range(3):  # a block's steps overwrite the same slots
        cache.place(4, 2)
        keys, _ = cache.update(block * step, block, layer_idx=0)
        assert keys.shape == (2, 3, 6, 5) and torch.equal(keys[:, :, 4:], block * step)
        assert torch.equal(keys[:, :, :4], first)
    assert cache.keys[0].data_ptr() == pointer and cache.get_seq_length() == 4
    cache.place(6, 2, attend=10)
    keys, _ = cache.update(block, block, layer_idx=0)
    assert keys.shape == (2, 3, 10, 5)


def test_capacity_buckets():
    assert [capacity_bucket(n) for n in (1, 256, 257, 2080)] == [256, 256, 512, 2304]


def test_engine_choice():
    assert resolve_engine("auto", torch.device("cpu"), torch.float32) == "fast"
    assert resolve_engine("auto", torch.device("cpu"), torch.bfloat16) == "exact"
    assert resolve_engine("auto", torch.device("cuda"), torch.bfloat16) == "fast"
    assert resolve_engine("auto", torch.device("cuda"), torch.float16) == "exact"  # never compared
    assert resolve_engine("exact", torch.device("cpu"), torch.float32) == "exact"
    with pytest.raises(DecodeConfigError, match="engine must be one of"):
        DecodeConfig(engine="turbo")


def test_engine_choice_is_described_for_the_logs():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert describe_engine("auto", cpu, torch.float32) == "fast (auto: shown token-identical to exact on cpu float32)"
    assert describe_engine("auto", cuda, torch.float16).startswith("exact (auto: the fast engine was never shown")
    assert describe_engine("exact", cuda, torch.bfloat16) == "exact (decoding.engine: exact)"
    assert describe_engine("fast", cpu, torch.bfloat16) == "fast (decoding.engine: fast)"
    assert describe_engine("fused", cuda, torch.bfloat16) == "fused (decoding.engine: fused)"
    assert resolve_engine("fused", cpu, torch.float32) == "fused"


def test_auto_picks_the_fused_engine_only_where_the_yardstick_admitted_it(tmp_path, caplog):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    report = tmp_path / "engine_admission.json"
    assert resolve_engine("auto", cuda, torch.bfloat16, admission_file=report) == "fast"  # no verdict: tier 1
    verdict = {"device": "cuda", "dtype": "bfloat16", "verdicts": {"fused": {"admitted": True}}}
    report.write_text(json.dumps(verdict))
    assert resolve_engine("auto", cuda, torch.bfloat16, admission_file=report) == "fused"
    assert describe_engine("auto", cuda, torch.bfloat16, admission_file=report).startswith("fused (auto: admitted")
    assert resolve_engine("auto", cuda, torch.float32, admission_file=report) == "fast"  # measured in bf16 only
    assert resolve_engine("auto", cpu, torch.float32, admission_file=report) == "fast"  # CUDA only
    report.write_text(json.dumps({**verdict, "device": "cpu", "dtype": "float32"}))
    assert resolve_engine("auto", cpu, torch.float32, admission_file=report) == "fast"  # never fused off CUDA
    report.write_text(json.dumps({**verdict, "verdicts": {"fused": {"admitted": False}}}))
    assert resolve_engine("auto", cuda, torch.bfloat16, admission_file=report) == "fast"
    report.write_text("{not json")
    assert resolve_engine("auto", cuda, torch.bfloat16, admission_file=report) == "fast"
    assert "unreadable" in caplog.text


def test_the_admission_verdict_lives_in_the_users_cache(tmp_path, monkeypatch):
    from wam_diff2_ros.core.cache import CACHE_ENV
    from wam_diff2_ros.core.engine.selection import admission_path

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert admission_path() == tmp_path / "cache" / "engine_admission.json"
    cuda = torch.device("cuda")
    assert resolve_engine("auto", cuda, torch.bfloat16) == "fast"
    admission_path().parent.mkdir(parents=True)
    verdict = {"device": "cuda", "dtype": "bfloat16", "verdicts": {"fused": {"admitted": True}}}
    admission_path().write_text(json.dumps(verdict))
    assert resolve_engine("auto", cuda, torch.bfloat16) == "fused"  # read from there by default


def test_runners_are_chosen_in_one_place_and_keep_their_state_off_the_backbone(tiny):
    backbone, processor, conversations = tiny
    runners = Runners(backbone)
    fast = runners.select("fast")
    assert runners.select("auto") is fast and runners.select("fast") is fast  # CPU float32: auto is fast
    assert isinstance(runners.select("exact"), ExactRunner)
    fused = runners.select("fused")
    assert fused is not fast and runners.select("fused") is fused and fused.fused
    before = dict(vars(backbone))
    inputs = processor(conversations[:1], padding_side="left")
    config = DecodeConfig(max_new_tokens=8, block_size=8, engine="fast")
    for _ in range(2):
        block_diffusion_decode(
            backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw,
            config, runners=runners,
        )  # fmt: skip
    assert vars(backbone).keys() == before.keys()  # nothing stashed on the backbone
    assert runners.fast_runners() == {(True, False, False): fast, (True, True, False): fused}
    masked = torch.tensor([[True, False]])
    assert runners.select("exact").open_rows(masked) is ALL_ROWS and isinstance(ALL_ROWS, AllRows)
    assert fast.open_rows(masked).tolist() == [0] and fast.open_rows(~torch.ones_like(masked)) is None


# ------------------------------------------------------------------------------ exactness on tiny


def tiny_conversations():
    """Three prompts of very different lengths, one with two images (the exactness grid's inputs)."""
    return [
        build_messages("Front view: <image>\nThe navigation information is: left", [noise_image(64, 64)]),
        build_messages(
            "Describe the scene <image> " + "in a good many more words than the other prompts do " * 6,
            [noise_image(96, 64, 1)],
        ),
        build_messages("Two cameras <image> and <image> straight", [noise_image(64, 96, 2), noise_image(64, 64, 3)]),
    ]


def inputs_for(processor, conversations, layout):
    """Processor inputs for a grid layout: `single` (the first prompt), else all three padded `left`/`right`."""
    batch = conversations[:1] if layout == "single" else conversations
    return processor(batch, padding_side="left" if layout == "single" else layout)


def run_bucket_steps_on_cpu(monkeypatch, store):
    """Make the fast engine on CPU run every step through `store` (a `CudaGraphSteps(capture=False)`): the
    computation a CUDA graph holds, all rows' logits, eagerly."""

    init = FastRunner.__init__

    def bucket_steps(self, backbone, cuda_graphs=True, fused=False, triton_kernels=False):
        init(self, backbone, cuda_graphs, fused, triton_kernels)
        self.masked_rows_only, self.graphs = False, store

    monkeypatch.setattr(FastRunner, "__init__", bucket_steps)


@pytest.fixture(scope="module")
def tiny():
    info = inspect_checkpoint(tiny_checkpoint(seed=1))
    model = load_model(info, torch.device("cpu"), torch.float32)
    processor = load_processor(info)
    conversations = tiny_conversations()
    return BlockDiffusionBackbone(model), processor, conversations


def both_engines(backbone, inputs, config):
    outputs = [
        block_diffusion_decode(
            backbone,
            inputs.input_ids,
            inputs.attention_mask,
            inputs.pixel_values,
            inputs.image_grid_thw,
            config.with_overrides(engine=engine),
        )
        for engine in ("exact", "fast")
    ]
    return outputs


def assert_same(outputs):
    exact, fast = outputs
    assert fast.sequences.tolist() == exact.sequences.tolist()
    assert fast.steps_per_block == exact.steps_per_block
    assert fast.finished == exact.finished


# block size x denoising steps (fewer than, equal to, more than the block) x layout
GRID = [
    (strategy, block, steps, layout)
    for strategy in STRATEGIES
    for block, steps, layout in (
        (4, 3, "single"),
        (4, 4, "left"),
        (8, 5, "right"),
        (8, 12, "left"),
        (32, 32, "right"),
        (32, 7, "single"),
    )
]


def test_fast_engine_runs_the_cpu_kernels_and_gives_the_same_tokens_without_them(tiny, monkeypatch):
    """On CPU the output layer runs on the masked rows and the text layers' projections on the block through
    core/engine/cpu_kernels.py; where those kernels are unavailable (cannot be built, no chunking matches) every row
    goes through the stock modules: the same tokens either way."""
    backbone, processor, conversations = tiny
    inputs = inputs_for(processor, conversations, "left")
    config = DecodeConfig(max_new_tokens=35, block_size=32, denoising_steps=32)
    answered = []
    row_logits = FastRunner.row_logits

    def counted(self, rows, block_shape):
        logits = row_logits(self, rows, block_shape)
        answered.append((rows.shape[0], logits is not None))
        return logits

    routed = []
    linear_forward = cpu_kernels.KernelLinear.forward

    def counted_linear(module, x):
        route = cpu_kernels._BLOCK_ROUTE.get()
        if route is not None and module in route.chunkings:  # this call runs the kernel
            routed.append(route.block_shape)
        return linear_forward(module, x)

    monkeypatch.setattr(FastRunner, "row_logits", counted)
    monkeypatch.setattr(cpu_kernels.KernelLinear, "forward", counted_linear)
    assert_same(both_engines(backbone, inputs, config))
    assert any(count < 3 * 32 for count, _ in answered)  # masked rows only, fewer than the block's
    # Which shapes run on the kernels is the probe's verdict on this CPU's MKL; the kernels run exactly there.
    verdicts = {key: path.startswith("kernel") for key, path in cpu_kernels.kernel_paths().items() if "(3, 32)" in key}
    if can_build_row_kernel(cpu_kernels.kernel_isa()):
        output_layer = [kernel for key, kernel in verdicts.items() if key.startswith("output layer")]
        assert output_layer and all(ok == output_layer[0] for _, ok in answered)
        assert (set(routed) == {(3, 32)}) == any(kernel for key, kernel in verdicts.items() if key.startswith("linear"))
    monkeypatch.setattr(FastRunner, "row_logits", lambda self, rows, block_shape: None)
    monkeypatch.setattr(FastRunner, "block_kernels", lambda self, block_shape: contextlib.nullcontext())
    assert_same(both_engines(backbone, inputs, config))


@pytest.mark.parametrize(("strategy", "block_size", "steps", "layout"), GRID)
def test_fast_equals_exact_greedy(tiny, strategy, block_size, steps, layout):
    backbone, processor, conversations = tiny
    inputs = inputs_for(processor, conversations, layout)
    config = DecodeConfig(
        max_new_tokens=block_size + 3,  # not a multiple of the block
        block_size=block_size,
        denoising_steps=steps,
        remasking_strategy=strategy,
    )
    assert_same(both_engines(backbone, inputs, config))


@pytest.mark.parametrize(
    ("strategy", "temperature", "top_k", "top_p", "layout"),
    [
        ("low_confidence_dynamic", 0.8, 50, 1.0, "left"),
        ("low_confidence_static", 1.0, 0, 0.9, "right"),
        ("sequential", 0.7, 0, 0.8, "single"),
        ("low_confidence_dynamic", 1.0, 0, 0.95, "single"),
        ("low_confidence_static", 0.9, 20, 1.0, "left"),
    ],
)
def test_fast_equals_exact_seeded_sampling(tiny, strategy, temperature, top_k, top_p, layout):
    backbone, processor, conversations = tiny
    inputs = inputs_for(processor, conversations, layout)
    config = DecodeConfig(
        max_new_tokens=20, block_size=8, denoising_steps=6, remasking_strategy=strategy,
        temperature=temperature, top_k=top_k, top_p=top_p, seed=5,
    )  # fmt: skip
    assert_same(both_engines(backbone, inputs, config))


@pytest.mark.parametrize(
    ("strategy", "block_size", "steps", "layout"),
    [
        ("low_confidence_dynamic", 8, 5, "left"),
        ("low_confidence_static", 4, 4, "right"),
        ("sequential", 32, 7, "single"),
    ],
)
def test_the_cuda_graph_step_computed_eagerly_gives_the_exact_tokens(
    tiny, monkeypatch, strategy, block_size, steps, layout
):
    """What a CUDA graph holds (the step over the whole 256-token bucket, slots past the block masked out, all
    rows' logits, replayed for the commit too), run eagerly on CPU: CI's check of the graph path's logic."""
    backbone, processor, conversations = tiny
    store = CudaGraphSteps(capture=False)
    run_bucket_steps_on_cpu(monkeypatch, store)
    inputs = inputs_for(processor, conversations, layout)
    config = DecodeConfig(
        max_new_tokens=2 * block_size + 3, block_size=block_size, denoising_steps=steps, remasking_strategy=strategy
    )
    assert_same(both_engines(backbone, inputs, config))
    assert store.enabled and store.graphs and all(cache.capacity % 256 == 0 for cache in store.caches.values())


def test_graph_store_keeps_the_most_recently_used_buckets_with_their_graphs():
    store = CudaGraphSteps(capture=False, kept_buckets=2)
    first = store.cache_for(1, 300)
    store.graphs[(1, 32, 512)] = {"for": "first"}
    second = store.cache_for(3, 300)
    store.graphs[(3, 32, 512)] = {"for": "second"}
    assert store.cache_for(1, 500) is first  # same bucket (512): reused, and now the most recent
    third = store.cache_for(1, 600)  # a third bucket: the least recently used (3, 512) goes, with its graph
    assert list(store.caches) == [(1, 512), (1, 768)] and store.caches[(1, 768)] is third
    assert list(store.graphs) == [(1, 32, 512)]
    assert store.cache_for(3, 300) is not second  # evicted: a new cache (its graphs would be captured again)


def test_evicted_buckets_are_rebuilt_with_the_same_tokens(tiny, monkeypatch):
    backbone, processor, conversations = tiny
    store = CudaGraphSteps(capture=False, kept_buckets=1)
    run_bucket_steps_on_cpu(monkeypatch, store)
    config = DecodeConfig(max_new_tokens=19, block_size=8, denoising_steps=6)
    for batch in (conversations[:1], conversations, conversations[:1]):  # batch 1, 3, then 1 again
        assert_same(both_engines(backbone, processor(batch, padding_side="left"), config))
        assert len(store.caches) == 1 and all(key[0] == len(batch) for key in store.graphs)


def test_fast_decoder_reads_the_device_at_most_once_per_step(tiny):
    backbone, processor, conversations = tiny
    inputs = processor(conversations, padding_side="left")
    config = DecodeConfig(max_new_tokens=40, block_size=8, engine="fast")
    steps_seen = []

    def cancel():  # polled once before every denoising step: counts steps
        steps_seen.append(counter.total)
        return False

    with count_host_reads() as counter:
        out = block_diffusion_decode(
            backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw,
            config, cancel=cancel,
        )  # fmt: skip
    assert sum(out.steps_per_block) >= 4
    reads_between_polls = [b - a for a, b in itertools.pairwise(steps_seen)]
    # within a block: exactly the step's one read; at a block boundary one more (finished samples)
    assert max(reads_between_polls) <= 2 and reads_between_polls.count(1) >= sum(out.steps_per_block) - 2 * len(
        out.steps_per_block
    )


def test_cancel_stops_the_fast_engine(tiny):
    backbone, processor, conversations = tiny
    inputs = processor(conversations[:1])
    polls = []

    def cancel():
        polls.append(1)
        return len(polls) > 2

    with pytest.raises(DecodeCancelledError):
        block_diffusion_decode(
            backbone, inputs.input_ids, inputs.attention_mask, inputs.pixel_values, inputs.image_grid_thw,
            DecodeConfig(max_new_tokens=32, block_size=8, engine="fast"), cancel=cancel,
        )  # fmt: skip
    assert len(polls) == 3


# ------------------------------------------------------------------------------ exactness on the demo


@pytest.fixture(scope="module")
def demo():
    from wam_diff2_ros.core.engine import Engine
    from wam_diff2_ros.core.prompts import build_planning_prompt
    from wam_diff2_ros.demo import resolve_model

    engine = Engine.load(resolve_model("demo"), device="cpu", dtype="float32")
    frames = [noise_image(640, 360, seed) for seed in range(2)]
    prompts = [build_planning_prompt(cmd, (v, 0.1), (0.2, -0.1)) for cmd, v in (("left", 3.0), ("straight", 9.5))]
    return engine, [build_messages(p, [f]) for p, f in zip(prompts, frames, strict=True)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "block_size", "steps", "batch", "sampling"),
    [
        ("low_confidence_dynamic", 32, 32, 1, False),
        ("low_confidence_static", 8, 5, 2, False),
        ("sequential", 4, 8, 2, False),
        ("low_confidence_dynamic", 32, 16, 2, True),
    ],
)
def test_fast_equals_exact_on_the_demo_model(demo, strategy, block_size, steps, batch, sampling):
    engine, conversations = demo
    config = DecodeConfig(
        max_new_tokens=96, block_size=block_size, denoising_steps=steps, remasking_strategy=strategy,
        **({"temperature": 0.8, "top_p": 0.9, "seed": 3} if sampling else {}),
    )  # fmt: skip
    exact = engine.generate_conversations(conversations[:batch], config.with_overrides(engine="exact"))
    fast = engine.generate_conversations(conversations[:batch], config.with_overrides(engine="fast"))
    assert [g.sequence for g in fast] == [g.sequence for g in exact]
    assert [g.steps_per_block for g in fast] == [g.steps_per_block for g in exact]
    if not sampling and strategy == "low_confidence_dynamic":
        assert "," in exact[0].text  # the demo model really plans (the comparison is not between empty answers)
