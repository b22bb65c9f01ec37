"""The fast engine's CPU kernels, tested as a contract that holds on any CPU and thread count.

- The kernels' arithmetic (per chunk a fused multiply-add chain from zero, chunk sums added in order, group sums
  added in order) is checked against a float64 emulation of that arithmetic, for every variant this CPU runs:
  no MKL involved, so a wrong index or order fails on every machine.
- The probe's verdict is honest: where it says "kernel", the kernel's bits equal the stock layer's (MKL's, on this
  machine and thread count) on fresh rows; where it says "fallback", the stock layer runs. Which verdict MKL's
  blocking leads to is the machine's business, not the test's; a stock layer with known arithmetic (the emulation)
  pins down that the probe finds a chunking where one exists.

The kernels are compiled with torch's extension builder (g++, ninja); where this machine cannot build them the
tests check the fallback.
"""

from __future__ import annotations

import logging
import os
import threading

import pytest
import torch
from core_helpers import can_build_row_kernel

from wam_diff2_ros.core.engine import cpu_kernels
from wam_diff2_ros.core.engine.cpu_kernels import (
    Chunking,
    ExactLinears,
    ExactRowLogits,
    KernelLinear,
    candidate_chunkings,
    kernel_isa,
    kernel_paths,
    load_kernel,
    pack_weights,
)

pytestmark = pytest.mark.core

ISA = kernel_isa()
needs_kernel = pytest.mark.skipif(not can_build_row_kernel(ISA), reason=f"cannot build the kernel here ({ISA})")
# Every variant this CPU runs: the AVX2 one is checked on AVX-512 CPUs too.
VARIANTS = [isa for isa in ("AVX512", "AVX2") if cpu_kernels.ISA_RANK[isa] <= cpu_kernels.ISA_RANK.get(ISA, 0)]
THREADS = sorted({1, 2, torch.get_num_threads()})


def _linear(outs: int, width: int, seed: int) -> torch.nn.Linear:
    """A bias-free float32 layer with seeded weights (an output layer or a projection)."""
    layer = torch.nn.Linear(width, outs, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(outs, width, generator=torch.Generator().manual_seed(seed)) * 0.05)
    return layer


def emulate(x: torch.Tensor, weight: torch.Tensor, chunking: Chunking) -> torch.Tensor:
    """x [N, K] @ weight[M, K].T with the kernels' arithmetic, in float64: a product of two floats is exact in
    float64, so each fused multiply-add is the float64 sum rounded once to float32 (fixed inputs: deterministic)."""
    x64, w64 = x.double(), weight.double()
    total = torch.zeros(x.shape[0], weight.shape[0])
    part = torch.zeros_like(total)
    start = 0
    for end in chunking.ends:
        acc = torch.zeros_like(total)
        for k in range(start, end):
            acc = (x64[:, k : k + 1] * w64[:, k][None, :] + acc.double()).float()
        part = part + acc
        if end in chunking.groups:
            total, part = total + part, torch.zeros_like(total)
        start = end
    return total


class EmulatedLinear(torch.nn.Linear):
    """A stock layer whose arithmetic is known: `emulate` under a fixed chunking."""

    def __init__(self, width: int, outs: int, chunking: Chunking) -> None:
        super().__init__(width, outs, bias=False)
        self.chunking = chunking

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return emulate(x.reshape(-1, x.shape[-1]), self.weight.detach(), self.chunking).view(*x.shape[:-1], -1)


def test_candidate_chunkings():
    candidates = candidate_chunkings(2048)
    assert candidates[0] == Chunking((2048,), (2048,))  # one chunk first (what MKL does up to 192 here)
    assert Chunking((128, 256), (256,)) in candidate_chunkings(256)
    assert Chunking((*range(192, 2048, 192), 2048), (2048,)) in candidates
    assert Chunking((*range(192, 1024, 192), 1024, *range(1216, 2048, 192), 2048), (1024, 2048)) in candidates
    for chunking in candidates:
        assert chunking.ends[-1] == chunking.groups[-1] == 2048
        assert list(chunking.ends) == sorted(set(chunking.ends)) and set(chunking.groups) <= set(chunking.ends)
    assert len(set(candidates)) == len(candidates)


def test_packed_weights_hold_every_column_in_tiles_of_16():
    weight = torch.arange(35 * 3, dtype=torch.float32).reshape(35, 3)
    packed = pack_weights(weight)
    assert packed.shape == (3, 3, 16)
    assert torch.equal(packed[1, :, 2], weight[18])  # tile 1, column 2 holds vocabulary row 18
    assert torch.equal(packed[2, :, 3:], torch.zeros(3, 13))  # padding past the vocabulary


def test_the_isa_variable_forces_a_variant_this_cpu_runs(monkeypatch):
    capability = torch.backends.cpu.get_cpu_capability()
    monkeypatch.setenv(cpu_kernels.ISA_ENV, "DEFAULT")
    assert kernel_isa() == "DEFAULT"
    monkeypatch.setenv(cpu_kernels.ISA_ENV, "AVX512")
    assert kernel_isa() == ("AVX512" if capability == "AVX512" else capability)  # never one the CPU lacks
    monkeypatch.delenv(cpu_kernels.ISA_ENV)
    assert kernel_isa() == capability


def test_each_build_is_named_by_its_source_flags_and_torch_build(monkeypatch, tmp_path):
    monkeypatch.setenv(cpu_kernels.DIR_ENV, str(tmp_path))
    first = cpu_kernels.build_directory("AVX2")
    assert first.startswith(str(tmp_path)) and first != cpu_kernels.build_directory("AVX512")
    monkeypatch.setattr(torch, "__version__", "0.0.0-another-build")
    assert cpu_kernels.build_directory("AVX2") != first
    monkeypatch.delenv(cpu_kernels.DIR_ENV)
    assert cpu_kernels.kernel_root() != str(tmp_path)


@needs_kernel
@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize(
    "chunking", [Chunking((40,), (40,)), Chunking((16, 32, 40), (40,)), Chunking((12, 20, 32, 40), (20, 40))]
)
def test_kernels_compute_their_stated_arithmetic(isa, chunking):
    """Every row count (1 .. 8 rows per output tile, 16 and 32 lanes across rows, several row groups) and output
    count (a vocabulary that is not a multiple of 16; linear columns that are not a multiple of 4)."""
    kernel = load_kernel(isa)
    assert kernel is not None, f"the {isa} kernel did not build ({cpu_kernels.kernel_loads().get(isa)})"
    generator = torch.Generator().manual_seed(len(chunking.ends))
    weight = torch.randn(35, 40, generator=generator)
    packed = pack_weights(weight)
    for rows in (1, 2, 5, 8, 9, 16, 17, 33, 40):
        x = torch.randn(rows, 40, generator=generator) * 4
        expected = emulate(x, weight, chunking)
        ends, groups = list(chunking.ends), list(chunking.groups)
        assert torch.equal(kernel.chunked_logits(x, packed, ends, groups, 35), expected), rows
        assert torch.equal(kernel.chunked_linear(x, weight, ends, groups), expected), rows
    others = [emulate(x, weight, other) for other in candidate_chunkings(40)[:3] if other != chunking]
    assert all(not torch.equal(other, expected) for other in others)  # the order matters: the check can fail


@needs_kernel
def test_kernels_refuse_chunkings_that_do_not_cover_the_width():
    kernel = load_kernel()
    x, weight = torch.randn(2, 8), torch.randn(4, 8)
    for ends, groups in (([4], [4]), ([4, 8], [8, 4]), ([4, 8], [6, 8]), ([8, 4], [8])):
        with pytest.raises(RuntimeError):
            kernel.chunked_linear(x, weight, ends, groups)


@needs_kernel
@pytest.mark.parametrize("chunking", [Chunking((32, 64, 96), (96,)), Chunking((32, 48, 80, 96), (48, 96))])
def test_the_probe_finds_the_chunking_a_stock_layer_uses(chunking):
    """A stock layer with known arithmetic: the probe must route through the kernel, bit for bit."""
    head = EmulatedLinear(96, 300, chunking)
    with torch.no_grad():
        head.weight.copy_(_linear(300, 96, seed=3).weight)
    hidden = torch.randn(1, 8, 96, generator=torch.Generator().manual_seed(4))
    logits = ExactRowLogits(head)(hidden[0][[1, 5]], (1, 8))
    assert logits is not None and torch.equal(logits, head(hidden)[0][[1, 5]])
    module = EmulatedLinear(96, 30, chunking)
    with torch.no_grad():
        module.weight.copy_(head.weight[:30])
    holder = torch.nn.Sequential(module)
    with ExactLinears(holder).installed((1, 8)) as routed_layers:
        assert routed_layers == {holder[0]}
        routed = holder[0](hidden)
    assert torch.equal(routed, module(hidden)) and torch.equal(holder[0](hidden), module(hidden))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize(
    ("vocab", "width", "block_shape"),
    [
        (151_936, 256, (1, 32)),
        (151_936, 256, (3, 32)),
        (8_192, 2048, (1, 32)),
        (3_001, 64, (1, 8)),
        (1_000, 100, (2, 6)),
    ],
)
def test_row_logits_are_lm_heads_bits_or_decline(vocab, width, block_shape, threads, monkeypatch):
    """Where the probe says "kernel" every chosen row has `lm_head`'s bits in the whole block; where it says
    "fallback" the caller gets None (and computes all rows with `lm_head`)."""
    monkeypatch.setattr(cpu_kernels, "_PATHS", {})
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        head = _linear(vocab, width, seed=width)
        generator = torch.Generator().manual_seed(vocab)
        hidden = torch.randn(*block_shape, width, generator=generator) * 3
        full = head(hidden).reshape(-1, vocab)
        layer = ExactRowLogits(head)
        total = block_shape[0] * block_shape[1]
        verdicts = set()
        for count in sorted({1, 2, 3, 5, 8, 11, 12, 17, total}):
            if count > total:
                continue
            rows = torch.randperm(total, generator=generator)[:count]
            logits = layer(hidden.reshape(total, width)[rows], block_shape)
            verdicts.add(logits is not None)
            if logits is not None:
                assert logits.shape == (count, vocab)
                assert torch.equal(logits, full[rows]), count
    finally:
        torch.set_num_threads(previous)
    assert len(verdicts) == 1  # one verdict per shape and thread count
    if can_build_row_kernel(ISA):
        (path,) = kernel_paths().values()
        assert path.startswith("kernel" if verdicts == {True} else "fallback"), path


@pytest.mark.parametrize("threads", THREADS)
def test_an_output_layer_of_mostly_zero_rows_computes_only_the_others_with_the_same_bits(threads, monkeypatch):
    """The demo's output layer keeps only the rows of the tokens it uses: the kernel packs those alone, and every
    logit, the zero rows' included, has `lm_head`'s bits in the whole block."""
    monkeypatch.setattr(cpu_kernels, "_PATHS", {})
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        vocab, width = 151_936, 256
        head = _linear(vocab, width, seed=5)
        live = torch.sort(torch.randperm(vocab, generator=torch.Generator().manual_seed(6))[:84]).values
        with torch.no_grad():
            keep = head.weight[live].clone()
            head.weight.zero_()
            head.weight[live] = keep
        assert torch.equal(cpu_kernels.live_rows(head.weight), live)
        hidden = torch.randn(1, 32, width, generator=torch.Generator().manual_seed(7)) * 3
        full = head(hidden).reshape(-1, vocab)
        layer = ExactRowLogits(head)
        verdicts = set()
        for rows in (torch.arange(32), torch.tensor([0, 3, 31]), torch.tensor([17])):
            logits = layer(hidden[0][rows], (1, 32))
            verdicts.add(logits is not None)
            if logits is not None:
                assert logits.shape == (rows.numel(), vocab)
                assert torch.equal(logits, full[rows])
                assert layer._packed_weights()[0].shape[0] == -(-84 // 16)  # 6 tiles instead of 9496
        block = hidden.clone()
        block[0, 9, 7] = float("inf")  # the stock layer writes NaN into the zero rows' logits of such a row
        block[0, 11, 3] = float("nan")
        broken = block[0][[2, 9, 11]]
        logits = layer(broken, (1, 32))
        if logits is not None:  # the same NaN (and the same other logits) without a host read
            stock = head(block).reshape(-1, vocab)[[2, 9, 11]]
            assert torch.equal(logits.isnan(), stock.isnan()) and logits.isnan()[1:].any()
            assert torch.equal(logits[~logits.isnan()], stock[~stock.isnan()])
            assert not logits[0].isnan().any()
            from wam_diff2_ros.bench.host_reads import count_host_reads

            with count_host_reads() as reads:
                layer(broken, (1, 32))
            assert reads.total == 0
    finally:
        torch.set_num_threads(previous)
    assert len(verdicts) == 1
    if can_build_row_kernel(ISA):
        ((what, path),) = kernel_paths().items()
        assert "(84 nonzero rows)" in what
        assert path.startswith("kernel" if verdicts == {True} else "fallback"), path


@needs_kernel
def test_zero_rows_whose_stock_logits_are_not_zero_keep_to_the_stock_layer(monkeypatch):
    """Leaving zero rows out is right only where the stock layer gives them 0: the probe checks that."""
    monkeypatch.setattr(cpu_kernels, "_PATHS", {})

    class Shifted(torch.nn.Linear):  # the rows that are not zero keep the stock bits; the zero rows give 1
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = super().forward(x)
            out[..., 40:] += 1.0
            return out

    head = Shifted(64, 4_000, bias=False)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[:40] = torch.randn(40, 64, generator=torch.Generator().manual_seed(8))
    assert ExactRowLogits(head)(torch.randn(8, 64), (1, 8)) is None
    ((what, path),) = kernel_paths().items()
    assert "(40 nonzero rows)" in what and path.startswith("fallback"), (what, path)


def test_live_rows_only_where_at_least_half_the_rows_are_zero():
    weight = torch.zeros(10, 4)
    weight[[2, 7]] = 1.0
    assert cpu_kernels.live_rows(weight).tolist() == [2, 7]
    weight[[0, 1, 3, 4]] = -1.0  # 6 live rows of 10: no gain worth a second path
    assert cpu_kernels.live_rows(weight) is None
    assert cpu_kernels.live_rows(torch.zeros(4, 4)).tolist() == []


@needs_kernel
def test_row_logits_follow_in_place_weight_changes():
    head = EmulatedLinear(64, 2_000, Chunking((64,), (64,)))  # known arithmetic: the kernel path runs
    with torch.no_grad():
        head.weight.copy_(_linear(2_000, 64, seed=1).weight)
    hidden = torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(2))
    layer = ExactRowLogits(head)
    assert torch.equal(layer(hidden[0], (1, 8)), head(hidden)[0])
    with torch.no_grad():
        head.weight.mul_(2.0)  # an in-place change must not leave stale packed weights behind
    assert torch.equal(layer(hidden[0], (1, 8)), head(hidden)[0])


@needs_kernel
def test_a_layer_no_chunking_reproduces_falls_back(monkeypatch):
    """A layer computed another way (float64 products) matches no candidate: the stock forward runs."""
    monkeypatch.setattr(cpu_kernels, "_PATHS", {})

    class OtherSums(torch.nn.Linear):
        def forward(self, x):
            return torch.nn.functional.linear(x.double(), self.weight.double()).float()

    head = OtherSums(512, 1_000, bias=False)
    assert ExactRowLogits(head)(torch.randn(4, 512), (1, 4)) is None
    module = OtherSums(512, 64, bias=False)
    block = torch.randn(1, 4, 512)
    holder = torch.nn.Sequential(module)
    with ExactLinears(holder).installed((1, 4)) as routed:
        assert not routed
        assert torch.equal(holder[0](block), torch.nn.functional.linear(block.double(), module.weight.double()).float())
    assert all(path.startswith("fallback") for path in kernel_paths().values()) and len(kernel_paths()) == 2


def test_row_logits_decline_what_they_do_not_cover():
    head = _linear(100, 16, seed=0)
    assert ExactRowLogits(head)(torch.randn(2, 16, dtype=torch.float64), (1, 2)) is None
    with_bias = torch.nn.Linear(16, 100)
    assert ExactRowLogits(with_bias)(torch.randn(2, 16), (1, 2)) is None
    assert ExactRowLogits(head, isa="DEFAULT")(torch.randn(2, 16), (1, 2)) is None  # no kernel variant


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize(
    ("outs", "width", "block_shape"),
    [(6_144, 2_048, (1, 32)), (2_048, 6_144, (1, 32)), (1_024, 2_048, (3, 32)), (1_001, 100, (1, 8)), (35, 64, (2, 6))],
)
def test_block_linears_are_the_stock_bits_while_installed(outs, width, block_shape, threads, monkeypatch):
    """Routed through the kernel where the probe says "kernel", left stock where it says "fallback": either way
    a block's rows get the stock layer's bits, other inputs the stock forward, and the forward is restored."""
    monkeypatch.setattr(cpu_kernels, "_PATHS", {})
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        module = _linear(outs, width, seed=outs)
        hidden = torch.randn(*block_shape, width, generator=torch.Generator().manual_seed(width)) * 2
        stock = module(hidden)
        holder = torch.nn.Sequential(module)
        with ExactLinears(holder).installed(block_shape) as routed_layers:
            routed = holder[0] in routed_layers
            inside = holder[0](hidden)
            other = torch.randn(5, width)  # not a block's rows: the stock forward
            assert torch.equal(holder[0](other), torch.nn.functional.linear(other, module.weight))
        assert cpu_kernels._BLOCK_ROUTE.get() is None  # routed only inside
        assert isinstance(holder[0], KernelLinear) and holder[0].weight is module.weight
        assert holder.state_dict().keys() == {"0.weight"}
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(inside, stock)
    if can_build_row_kernel(ISA):
        (path,) = kernel_paths().values()
        assert path.startswith("kernel" if routed else "fallback"), path


def test_installed_linears_leave_what_they_do_not_cover_alone():
    with_bias = torch.nn.Linear(16, 8)
    half = torch.nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    holder = torch.nn.Sequential(with_bias, half, torch.nn.ReLU())
    linears = ExactLinears(holder)
    with linears.installed((1, 4)) as routed:
        assert not routed
    assert linears.modules == [] and list(holder) == [with_bias, half, holder[2]]


@needs_kernel
def test_a_finished_build_is_loaded_without_the_builder(monkeypatch):
    """A second process of the same environment (here: a cleared cache) imports the build; it never rebuilds."""
    assert load_kernel() is not None
    monkeypatch.setattr(cpu_kernels, "_KERNELS", {})
    monkeypatch.setattr(cpu_kernels, "_LOADS", {})

    def no_build(*args):
        raise AssertionError("rebuilt although a finished build was there")

    monkeypatch.setattr(cpu_kernels, "_build", no_build)
    assert load_kernel() is not None
    assert cpu_kernels.kernel_loads()[ISA].startswith("loaded in")


def test_a_kernel_build_that_fails_leaves_the_stock_layers(monkeypatch, tmp_path, caplog):
    """A failed build (here: an option g++ rejects) is logged once and the callers get None / stock modules."""
    monkeypatch.setenv(cpu_kernels.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpu_kernels, "_KERNELS", {})
    monkeypatch.setattr(cpu_kernels, "kernel_flags", lambda isa: ["-fno-such-option-in-any-compiler"])
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert load_kernel("BROKEN") is None
        assert load_kernel("BROKEN") is None  # remembered: no second build
    assert sum("CPU kernels unavailable" in record.getMessage() for record in caplog.records) == 1
    assert cpu_kernels.kernel_loads()["BROKEN"].startswith("unavailable")
    head = _linear(100, 16, seed=0)
    assert ExactRowLogits(head, isa="BROKEN")(torch.randn(2, 16), (1, 2)) is None
    module = _linear(8, 16, seed=1)
    with ExactLinears(torch.nn.Sequential(module), isa="BROKEN").installed((1, 2)) as routed:
        assert not routed


def test_a_build_killed_earlier_does_not_block_the_next_one(monkeypatch, tmp_path, caplog):
    """torch's builder waits, forever, for the `lock` file a killed build leaves in its directory; the next build
    removes that leftover (it holds an OS lock every build of these kernels takes) and goes on (here to a failed
    build, quickly: an option g++ rejects)."""
    monkeypatch.setenv(cpu_kernels.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpu_kernels, "_KERNELS", {})
    monkeypatch.setattr(cpu_kernels, "kernel_flags", lambda isa: ["-fno-such-option-in-any-compiler"])
    directory = cpu_kernels.build_directory("KILLED")
    assert directory.startswith(str(tmp_path))
    os.makedirs(directory)
    leftover = os.path.join(directory, cpu_kernels.TORCH_BUILD_LOCK)
    open(leftover, "w").close()
    done = threading.Event()

    def build() -> None:
        load_kernel("KILLED")
        done.set()

    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        threading.Thread(target=build, daemon=True).start()  # a daemon: a hang fails the test, not the session
        assert done.wait(600), "the build waited for the killed build's lock file"
    assert not os.path.exists(leftover)
    assert any("left by a kernel build that was killed" in record.getMessage() for record in caplog.records)
