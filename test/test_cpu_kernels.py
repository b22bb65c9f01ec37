"""The fast engine's CPU kernels: the exact engine's logits for any subset of a block's rows, and the text
layers' projections on a block, bit for bit.

The kernel is compiled with torch's extension builder (g++, ninja). Where this machine can build it, the tests
require that it builds and matches `lm_head`; where it cannot (no compiler, no AVX2), they check the fallback.
"""

from __future__ import annotations

import logging
import os
import threading

import pytest
import torch
from core_helpers import can_build_row_kernel

from wam_diff2_ros.core import cpu_kernels
from wam_diff2_ros.core.cpu_kernels import (
    ExactLinears,
    ExactRowLogits,
    candidate_chunkings,
    load_kernel,
    pack_weights,
)

pytestmark = pytest.mark.core


ISA = torch.backends.cpu.get_cpu_capability()
needs_kernel = pytest.mark.skipif(not can_build_row_kernel(ISA), reason=f"cannot build the kernel here ({ISA})")


def _linear(outs: int, width: int, seed: int) -> torch.nn.Linear:
    """A bias-free float32 layer with seeded weights (an output layer or a projection)."""
    layer = torch.nn.Linear(width, outs, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(outs, width, generator=torch.Generator().manual_seed(seed)) * 0.05)
    return layer


def test_candidate_chunkings():
    assert candidate_chunkings(64)[0] == (64,)  # one chunk first (what MKL does up to 192 here)
    assert (128, 256) in candidate_chunkings(256)
    assert (*range(192, 2048, 192), 2048) in candidate_chunkings(2048)
    assert all(ends[-1] == 2048 and list(ends) == sorted(set(ends)) for ends in candidate_chunkings(2048))


def test_packed_weights_hold_every_column_in_tiles_of_16():
    weight = torch.arange(35 * 3, dtype=torch.float32).reshape(35, 3)
    packed = pack_weights(weight)
    assert packed.shape == (3, 3, 16)
    assert torch.equal(packed[1, :, 2], weight[18])  # tile 1, column 2 holds vocabulary row 18
    assert torch.equal(packed[2, :, 3:], torch.zeros(3, 13))  # padding past the vocabulary


@needs_kernel
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
def test_row_logits_are_bitwise_lm_head_in_the_whole_block(vocab, width, block_shape):
    head = _linear(vocab, width, seed=width)
    generator = torch.Generator().manual_seed(vocab)
    hidden = torch.randn(*block_shape, width, generator=generator) * 3
    full = head(hidden).reshape(-1, vocab)
    layer = ExactRowLogits(head)
    total = block_shape[0] * block_shape[1]
    for count in sorted({1, 2, 3, 5, 8, 11, 12, 17, total}):
        if count > total:
            continue
        rows = torch.randperm(total, generator=generator)[:count]
        logits = layer(hidden.reshape(total, width)[rows], block_shape)
        assert logits is not None, "the kernel built but no chunking matched lm_head"
        assert logits.shape == (count, vocab)
        assert torch.equal(logits, full[rows]), count


@needs_kernel
def test_row_logits_follow_in_place_weight_changes():
    head = _linear(2_000, 64, seed=1)
    hidden = torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(2))
    layer = ExactRowLogits(head)
    assert torch.equal(layer(hidden[0], (1, 8)), head(hidden)[0])
    with torch.no_grad():
        head.weight.mul_(2.0)  # an in-place change must not leave stale packed weights behind
    assert torch.equal(layer(hidden[0], (1, 8)), head(hidden)[0])


@needs_kernel
def test_a_layer_no_chunking_reproduces_gets_none():
    """A head computed another way (float64 products) matches no candidate: the caller must compute all rows."""

    class OtherSums(torch.nn.Linear):
        def forward(self, x):
            return torch.nn.functional.linear(x.double(), self.weight.double()).float()

    head = OtherSums(512, 1_000, bias=False)
    layer = ExactRowLogits(head)
    assert layer(torch.randn(4, 512), (1, 4)) is None


def test_row_logits_decline_what_they_do_not_cover():
    head = _linear(100, 16, seed=0)
    assert ExactRowLogits(head)(torch.randn(2, 16, dtype=torch.float64), (1, 2)) is None
    with_bias = torch.nn.Linear(16, 100)
    assert ExactRowLogits(with_bias)(torch.randn(2, 16), (1, 2)) is None
    assert ExactRowLogits(head, isa="DEFAULT")(torch.randn(2, 16), (1, 2)) is None  # no kernel variant


@pytest.mark.slow
@pytest.mark.skipif(ISA != "AVX512" or not can_build_row_kernel("AVX2"), reason="needs an AVX-512 CPU to also run AVX2")
def test_the_avx2_variant_gives_the_same_bits():
    """The variant for CPUs without AVX-512 (two 8-lane registers per 16 lanes), built and checked here too."""
    assert load_kernel("AVX2") is not None
    head = _linear(151_936, 256, seed=5)
    hidden = torch.randn(1, 32, 256, generator=torch.Generator().manual_seed(6))
    rows = torch.tensor([0, 3, 7, 8, 9, 20, 31])
    logits = ExactRowLogits(head, isa="AVX2")(hidden[0][rows], (1, 32))
    assert logits is not None and torch.equal(logits, head(hidden)[0][rows])
    module = _linear(1_024, 2_048, seed=7)
    block = torch.randn(1, 32, 2_048, generator=torch.Generator().manual_seed(8))
    with ExactLinears([module], isa="AVX2").installed((1, 32)):
        assert "forward" in vars(module)
        routed = module(block)
    assert torch.equal(routed, module(block))


@needs_kernel
@pytest.mark.parametrize(
    ("outs", "width", "block_shape"),
    [(6_144, 2_048, (1, 32)), (2_048, 6_144, (1, 32)), (1_024, 2_048, (3, 32)), (1_001, 100, (1, 8)), (35, 64, (2, 6))],
)
def test_block_linears_are_bitwise_the_stock_ones_while_installed(outs, width, block_shape):
    module = _linear(outs, width, seed=outs)
    hidden = torch.randn(*block_shape, width, generator=torch.Generator().manual_seed(width)) * 2
    stock = module(hidden)
    linears = ExactLinears([module])
    calls = []
    with linears.installed(block_shape):
        assert "forward" in vars(module), "no chunking matched the stock linear"
        calls.append(module(hidden))
        other = torch.randn(5, width)  # not a block's rows: the stock forward
        assert torch.equal(module(other), torch.nn.functional.linear(other, module.weight))
    assert "forward" not in vars(module)  # restored
    assert torch.equal(calls[0], stock)


def test_installed_linears_leave_what_they_do_not_cover_alone():
    with_bias = torch.nn.Linear(16, 8)
    half = torch.nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    linears = ExactLinears([with_bias, half, torch.nn.ReLU()])
    with linears.installed((1, 4)):
        assert "forward" not in vars(with_bias) and "forward" not in vars(half)
    assert [type(m) for m in linears.modules] == [torch.nn.Linear, torch.nn.Linear]


def test_a_kernel_build_that_fails_leaves_the_stock_layers(monkeypatch, caplog):
    """A failed build (here: an option g++ rejects) is logged once and the callers get None / stock modules."""
    monkeypatch.setattr(cpu_kernels, "_KERNELS", {})
    monkeypatch.setattr(cpu_kernels, "kernel_flags", lambda isa: ["-fno-such-option-in-any-compiler"])
    with caplog.at_level(logging.WARNING, logger=cpu_kernels.__name__):
        assert load_kernel("BROKEN") is None
        assert load_kernel("BROKEN") is None  # remembered: no second build
    assert sum("CPU kernels unavailable" in record.getMessage() for record in caplog.records) == 1
    head = _linear(100, 16, seed=0)
    assert ExactRowLogits(head, isa="BROKEN")(torch.randn(2, 16), (1, 2)) is None
    module = _linear(8, 16, seed=1)
    with ExactLinears([module], isa="BROKEN").installed((1, 2)):
        assert "forward" not in vars(module)


def test_a_build_killed_earlier_does_not_block_the_next_one(monkeypatch, tmp_path, caplog):
    """torch's builder waits, forever, for the `lock` file a killed build leaves in its directory; the next build
    removes that leftover (it holds an OS lock every build of these kernels takes) and goes on (here to a failed
    build, quickly: an option g++ rejects)."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
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
        assert done.wait(120), "the build waited for the killed build's lock file"
    assert not os.path.exists(leftover)
    assert any("left by a kernel build that was killed" in record.getMessage() for record in caplog.records)
