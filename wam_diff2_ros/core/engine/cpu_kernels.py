"""The fast engine's CPU kernels: float32 matrix products with the exact engine's bits, at memory speed.

On CPU a denoising step is almost all matrix products with few rows (one block: 32 per sample), where MKL's
float32 GEMM is slow (as long for 4 rows of the 151,936-token output layer as for 32). Both engines must get
the same bits, so the kernels (`cpu_kernels.cpp`, shipped with the package) reproduce MKL's arithmetic: each
output is summed over consecutive chunks of the input width, each chunk a fused multiply-add chain started from
zero, the chunk sums added in order (on the development CPU: one chunk up to a width of 192, 2 x 128 at 256,
chunks of 192 from 384 on); a `Chunking` may also split the width into groups summed separately and then added,
as a GEMM that splits the width across threads does. Two kernels:

- `chunked_logits`: the output layer on any subset of a block's rows (the still-masked ones), on the weights
  packed as [V / 16, D, 16] tiles (`ExactRowLogits`; one more copy of the output layer's weights).
- `chunked_linear`: the text layers' projections on a whole block, vector lanes across the rows, the weights
  read in place (`ExactLinears`: the layers become `KernelLinear`s, routed through the kernel around the fast
  engine's step and commit forwards only).

Nothing about MKL's chunking is assumed: each (weight shape, block shape, thread count) is probed once per
process by running the stock layer on random rows and keeping the first candidate chunking under which every
output has the same bits. Where none does (another CPU's MKL may block differently), or the kernels cannot be
built (they need g++, ninja and AVX-512 or AVX2 with FMA), the stock modules run, as in the exact engine:
the tokens stay the same, only the speed-up is lost; `kernel_paths()` says which path each shape took.

The kernels are compiled once per environment (`scripts/bootstrap.sh` does it) into a folder named by the
source's hash, the compiler flags and the torch build (`build_directory`), under the environment's own prefix;
a process finding that build loads it without running the builder. `WAM_DIFF2_CPU_KERNEL_ISA=AVX2` selects the
AVX2 variant on an AVX-512 CPU; `WAM_DIFF2_KERNEL_DIR` moves the builds elsewhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

LOG = logging.getLogger(__name__)

LANES = 16  # vocabulary columns per packed tile (one AVX-512 register, two AVX2 registers)
PROBE_TILES = 64  # candidate chunkings are tried on the first 64 tiles (1024 logits), then on all of them
PROBE_COLUMNS = 64  # and on the first 64 outputs of a linear layer
CANDIDATE_CHUNK_SIZES = (64, 96, 128, 160, 192, 224, 256, 320, 384, 512)
KERNEL_NAME = "wam_diff2_cpu_kernels"  # the compiled module is KERNEL_NAME_<isa>_<build key>
KERNEL_SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
ISA_ENV = "WAM_DIFF2_CPU_KERNEL_ISA"  # force a variant (AVX2 on an AVX-512 CPU); default: torch's CPU capability
DIR_ENV = "WAM_DIFF2_KERNEL_DIR"  # where builds go; default: under the environment's prefix
TORCH_BUILD_LOCK = "lock"  # the file torch's extension builder holds in a build directory while it builds
READY = "ready"  # written into a build directory once its module built and imported


@dataclasses.dataclass(frozen=True)
class Chunking:
    """How a kernel sums the input width: chunk `ends`, and `groups` (ends of consecutive parts of the width,
    each a sum of its chunks from zero, added in order; one group is plain chunked summation)."""

    ends: tuple[int, ...]
    groups: tuple[int, ...]

    def __str__(self) -> str:
        split = "" if len(self.groups) == 1 else f" in groups ending {','.join(map(str, self.groups))}"
        return f"chunks ending {','.join(map(str, self.ends))}{split}"


_KERNELS: dict[str, Any] = {}  # ISA -> compiled module, or None when it could not be built
_LOADS: dict[str, str] = {}  # ISA -> how it was obtained ("built in 41.2 s", "loaded in 0.1 s", "unavailable: ...")
_PATHS: dict[
    str, str
] = {}  # "output layer 151936 x 256, blocks (1, 32), 2 threads" -> "kernel, chunks ..." | "fallback"


ISA_RANK = {"DEFAULT": 0, "AVX2": 1, "AVX512": 2}  # torch's CPU capabilities, each CPU runs its own and those below


def kernel_isa() -> str:
    """The variant to run: `WAM_DIFF2_CPU_KERNEL_ISA` where set and this CPU runs it, else torch's CPU capability."""
    capability = torch.backends.cpu.get_cpu_capability()
    forced = os.environ.get(ISA_ENV, "").strip().upper()
    if not forced:
        return capability
    if ISA_RANK.get(forced, 99) > ISA_RANK.get(capability, 0):
        LOG.warning("%s=%s: this CPU runs %s at most; using %s", ISA_ENV, forced, capability, capability)
        return capability
    return forced


def kernel_flags(isa: str) -> list[str] | None:
    """Compiler flags for one of torch's CPU capabilities, or None where the kernel has no variant."""
    return {
        "AVX512": ["-O3", "-mavx512f", "-mfma", "-DWAM_AVX512", "-fopenmp"],
        "AVX2": ["-O3", "-mavx2", "-mfma", "-fopenmp"],
    }.get(isa)


def build_key(flags: list[str]) -> str:
    """12 hex digits naming one build: the source, the flags, the torch build and the Python ABI."""
    digest = hashlib.sha256(KERNEL_SOURCE.read_bytes())
    for part in (*flags, torch.__version__, str(torch.version.git_version), sys.implementation.cache_tag):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:12]


def kernel_root() -> str:
    """Where the builds go: `WAM_DIFF2_KERNEL_DIR`, else inside this virtual environment, else (no virtual
    environment, or not writable) a folder of torch's extension root named by the interpreter's prefix."""
    if os.environ.get(DIR_ENV):
        return os.environ[DIR_ENV]
    own = os.path.join(sys.prefix, "var", "cache", "wam_diff2_ros")
    in_venv = sys.prefix != sys.base_prefix
    if in_venv and (os.access(sys.prefix, os.W_OK) or os.access(own, os.W_OK)):
        return own
    from torch.utils.cpp_extension import get_default_build_root

    prefix_key = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return os.path.join(get_default_build_root(), f"wam_diff2_ros_{prefix_key}")


def module_name(isa: str) -> str:
    """The compiled module's (and its build directory's) name for `isa` (which must have a variant)."""
    flags = kernel_flags(isa)
    if flags is None:
        raise ValueError(f"no CPU kernel variant for {isa}")
    return f"{KERNEL_NAME}_{isa.lower()}_{build_key(flags)}"


def build_directory(isa: str) -> str:
    """The folder the kernels for `isa` are built in and loaded from (one per source, flags and torch build)."""
    return os.path.join(kernel_root(), module_name(isa))


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """torch's extension builder runs `ninja` from PATH; the PyPI ninja lives next to the interpreter."""
    try:
        import ninja

        bin_dir = ninja.BIN_DIR
    except (ImportError, AttributeError):
        yield
        return
    previous = os.environ.get("PATH", "")
    os.environ["PATH"] = bin_dir + os.pathsep + previous
    try:
        yield
    finally:
        os.environ["PATH"] = previous


@contextlib.contextmanager
def _exclusive_build(directory: str) -> Iterator[None]:
    """Hold an OS lock on a build directory while building in it. The OS releases it when its process dies, unlike
    the `lock` file torch's builder leaves behind when a build is killed (a crash, SIGKILL, power loss), which would
    make every later build wait for it forever. Every build of these kernels takes this lock first, so a `lock`
    file found while holding it is such a leftover and is removed."""
    os.makedirs(directory, exist_ok=True)
    with open(directory + ".build-lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            leftover = os.path.join(directory, TORCH_BUILD_LOCK)
            if os.path.exists(leftover):
                LOG.warning("removing %s, left by a kernel build that was killed", leftover)
                os.remove(leftover)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _import_built(name: str, directory: str) -> Any:
    """The module a finished build left in `directory` (its `ready` mark says the build completed)."""
    from torch.utils.cpp_extension import LIB_EXT

    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, name + LIB_EXT))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {name} from {directory}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(name: str, directory: str, flags: list[str]) -> Any:
    """Compile the kernels into `directory` from a copy of the source held there (so the build's commands do not
    depend on where the package is checked out), mark the build finished and return the module."""
    from torch.utils.cpp_extension import load

    source = os.path.join(directory, KERNEL_SOURCE.name)
    if not os.path.exists(source) or Path(source).read_bytes() != KERNEL_SOURCE.read_bytes():
        shutil.copyfile(KERNEL_SOURCE, source)
    module = load(
        name=name, sources=[source], extra_cflags=flags, extra_ldflags=["-fopenmp"], build_directory=directory
    )
    Path(directory, READY).touch()
    return module


def load_kernel(isa: str | None = None) -> Any | None:
    """The compiled kernels for this CPU (or the given ISA; see `kernel_isa`): loaded from this environment's build,
    built there first if it has none; None where they cannot be (logged once; the callers run the stock layers)."""
    isa = (isa or kernel_isa()).upper()
    if isa in _KERNELS:
        return _KERNELS[isa]
    flags = kernel_flags(isa)
    module = None
    started = time.perf_counter()
    if flags is None:
        _LOADS[isa] = "unavailable: no kernel variant for this CPU"
        LOG.info("no CPU kernels for %s: the fast engine runs the stock layers on CPU", isa)
    else:
        name = module_name(isa)
        directory = build_directory(isa)
        try:
            if os.path.exists(os.path.join(directory, READY)):
                module, how = _import_built(name, directory), "loaded"
            else:
                LOG.info("building the fast engine's CPU kernels (%s) in %s (once per environment)", isa, directory)
                with _ninja_on_path(), _exclusive_build(directory):
                    if os.path.exists(os.path.join(directory, READY)):  # another process built it meanwhile
                        module, how = _import_built(name, directory), "loaded"
                    else:
                        module, how = _build(name, directory, flags), "built"
            _LOADS[isa] = f"{how} in {time.perf_counter() - started:.1f} s"
            LOG.info("CPU kernels %s %s (%s)", isa, _LOADS[isa], directory)
        except Exception as exc:  # no compiler, no ninja, a failed build: the fast engine keeps going without it
            _LOADS[isa] = f"unavailable: {exc}"
            LOG.warning("CPU kernels unavailable (%s): the fast engine runs the stock layers on CPU", exc)
    _KERNELS[isa] = module
    return module


def kernel_loads() -> dict[str, str]:
    """How this process got each kernel variant it asked for: "built in 41.2 s", "loaded in 0.1 s", "unavailable..."."""
    return dict(_LOADS)


def kernel_paths() -> dict[str, str]:
    """Per layer shape, block shape and thread count probed in this process: "kernel, chunks ..." or "fallback ..."
    (the stock layer runs: no chunking reproduced its bits, or no kernel)."""
    return dict(_PATHS)


def _record_path(what: str, block_shape: tuple[int, int], chunking: Chunking | None) -> None:
    key = f"{what}, blocks {block_shape}, {torch.get_num_threads()} threads"
    _PATHS[key] = f"kernel, {chunking}" if chunking else "fallback: no chunking reproduces the stock bits"
    LOG.info("CPU %s: %s", key, _PATHS[key])


def live_rows(weight: torch.Tensor) -> torch.Tensor | None:
    """Indices of the rows of an output weight [V, D] that are not all zero, where at least half are (else None)."""
    live = (weight != 0).any(dim=1).nonzero().squeeze(1)
    return live if 2 * live.numel() <= weight.shape[0] else None


def pack_weights(weight: torch.Tensor) -> torch.Tensor:
    """[V, D] output weights as [ceil(V / 16), D, 16] tiles (zero columns pad the last tile)."""
    vocab, width = weight.shape
    tiles = -(-vocab // LANES)
    if tiles * LANES != vocab:
        weight = torch.nn.functional.pad(weight, (0, 0, 0, tiles * LANES - vocab))
    return weight.reshape(tiles, LANES, width).transpose(1, 2).contiguous()


def _even_ends(start: int, stop: int, size: int) -> tuple[int, ...]:
    return (*range(start + size, stop, size), stop)


def candidate_chunkings(width: int) -> list[Chunking]:
    """Chunkings to try, most likely first: one chunk, fixed sizes (a shorter last chunk), even splits; then the
    width split in two halves (at the middle, or after half the chunks), each half chunked the same way."""
    found: list[Chunking] = []

    def add(ends: tuple[int, ...], groups: tuple[int, ...]) -> None:
        chunking = Chunking(ends, groups)
        if chunking not in found:
            found.append(chunking)

    sizes = [width, *(size for size in CANDIDATE_CHUNK_SIZES if size < width)]
    sizes += [-(-width // parts) for parts in range(2, 9)]
    for size in sizes:
        add(_even_ends(0, width, size), (width,))
    for size in sizes:
        chunks = -(-width // size)
        for split in sorted({width // 2, -(-chunks // 2) * size}):
            if 0 < split < width:
                add((*_even_ends(0, split, size), *_even_ends(split, width, size)), (split, width))
    return found


def find_chunking(
    run: Callable[[Chunking, bool], torch.Tensor], reference: torch.Tensor, width: int
) -> Chunking | None:
    """The first candidate chunking under which `run(chunking, full)` equals `reference` bit for bit: each is tried
    on a slice of the outputs first (`full=False`, compared with the same leading columns), then on all."""
    for chunking in candidate_chunkings(width):
        head = run(chunking, False)
        if torch.equal(head, reference[:, : head.shape[1]]) and torch.equal(run(chunking, True), reference):
            return chunking
    return None


class ExactRowLogits:
    """`lm_head`'s float32 logits for chosen rows of a [B, L, D] block, bit for bit (see the module docstring)."""

    def __init__(self, head: torch.nn.Module, isa: str | None = None) -> None:
        self.head = head
        self.isa = isa
        self._packed: tuple[Any, torch.Tensor, torch.Tensor | None] | None = None
        self._chunks: dict[tuple[Any, ...], Chunking | None] = {}

    def __call__(self, rows: torch.Tensor, block_shape: tuple[int, int]) -> torch.Tensor | None:
        """Logits [N, V] of hidden rows [N, D] taken from a [B, L] block, or None (compute all rows instead).

        Where most of the output layer's rows are zero (the demo model keeps only the rows of the tokens it uses),
        only the others are packed and computed; a zero row's logit is 0 in the stock layer too (NaN for a hidden
        row that is not finite: so are they here, without a host read), so the bits are the same and a step
        streams kilobytes of weights instead of the whole vocabulary's."""
        if not (_covered(self.head) and rows.dtype == torch.float32 and rows.device.type == "cpu"):
            return None
        kernel = load_kernel(self.isa)
        if kernel is None:
            return None
        packed, live = self._packed_weights()
        key = (tuple(packed.shape), block_shape, torch.get_num_threads())  # the chunking follows shapes, not values
        if key not in self._chunks:
            self._chunks[key] = self._probe(kernel, packed, live, block_shape)
        chunking = self._chunks[key]
        if chunking is None:
            return None
        vocab = self.head.weight.shape[0]
        count = vocab if live is None else live.numel()
        logits = kernel.chunked_logits(rows, packed, list(chunking.ends), list(chunking.groups), count)
        if live is None:
            return logits
        # 0 x inf and 0 x NaN are NaN in the stock layer's zero rows: a row with a value that is not finite gets NaN
        # there, decided on the device (a host read here would be a second one each step).
        finite = torch.isfinite(rows).all(dim=1, keepdim=True)
        zero_rows = torch.where(finite, 0.0, float("nan")).to(logits.dtype)
        return zero_rows.expand(logits.shape[0], vocab).contiguous().index_copy_(1, live, logits)

    def _weight_key(self) -> tuple[Any, ...]:
        weight = self.head.weight
        return (weight.data_ptr(), weight._version, tuple(weight.shape))

    def _packed_weights(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The packed tiles and the indices of the rows they hold (None: every row)."""
        key = self._weight_key()
        if self._packed is None or self._packed[0] != key:
            weight = self.head.weight.detach()
            live = live_rows(weight)
            self._packed = (key, pack_weights(weight if live is None else weight.index_select(0, live)), live)
        return self._packed[1], self._packed[2]

    @torch.no_grad()
    def _probe(
        self, kernel: Any, packed: torch.Tensor, live: torch.Tensor | None, block_shape: tuple[int, int]
    ) -> Chunking | None:
        vocab, width = self.head.weight.shape
        probe = _probe_block(block_shape, width)
        reference = self.head(probe).reshape(-1, vocab)
        flat = probe.reshape(-1, width)
        count = vocab if live is None else live.numel()
        what = f"output layer {vocab} x {width}" + ("" if live is None else f" ({count} nonzero rows)")
        if live is not None:
            if reference.index_fill(1, live, 0.0).any():  # a zero row gave a nonzero logit: keep to the stock layer
                _record_path(what, block_shape, None)
                return None
            reference = reference.index_select(1, live)

        def run(chunking: Chunking, full: bool) -> torch.Tensor:
            tiles = packed if full else packed[:PROBE_TILES]
            columns = count if full else min(count, tiles.shape[0] * LANES)
            return kernel.chunked_logits(flat, tiles, list(chunking.ends), list(chunking.groups), columns)

        chunking = find_chunking(run, reference, width)
        _record_path(what, block_shape, chunking)
        return chunking


class KernelLinear(torch.nn.Linear):
    """A linear layer of the text layers (float32, no bias), swapped in by `ExactLinears` for the stock one: the same
    weight and attributes (the state dict is unchanged). Inside `ExactLinears.installed(block_shape)` it computes a
    block's rows through `chunked_linear` with the bits of the stock layer's forward; everywhere else it runs that
    forward (`stock_type`'s)."""

    @classmethod
    def adopt(cls, stock: torch.nn.Linear) -> KernelLinear:
        """A kernel linear layer standing in for `stock`."""
        linear = cls(stock.in_features, stock.out_features, bias=False, device="meta")
        linear.weight = stock.weight
        for name, value in vars(stock).items():
            if name not in vars(linear):  # the stock layer's own attributes (nn.Linear's and nn.Module's are set)
                setattr(linear, name, value)
        linear.stock_type = type(stock)
        linear.train(stock.training)
        return linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        route = _BLOCK_ROUTE.get()
        chunking = None if route is None else route.chunkings.get(self)
        if route is None or chunking is None or tuple(x.shape[:-1]) != route.block_shape or x.dtype != torch.float32:
            return self.stock_type.forward(self, x)
        with torch.no_grad():
            flat = route.kernel.chunked_linear(
                x.reshape(-1, x.shape[-1]), self.weight, list(chunking.ends), list(chunking.groups)
            )
        return flat.view(*route.block_shape, -1)


@dataclasses.dataclass(frozen=True)
class _BlockRoute:
    kernel: Any
    chunkings: dict[torch.nn.Module, Chunking]
    block_shape: tuple[int, int]


_BLOCK_ROUTE: contextvars.ContextVar[_BlockRoute | None] = contextvars.ContextVar("cpu_block_route", default=None)


class ExactLinears:
    """The text layers' projections (`nn.Linear`, float32, no bias) on a block's rows, bit for bit as in the
    exact engine, through `chunked_linear` (weights read in place). Built once: it swaps the covered layers under
    `root` for `KernelLinear`s (the stock forward outside `installed`). `installed(block_shape)` routes them, in
    this context only, through the kernel, each weight shape after a probe like the output layer's; shapes the
    kernel cannot reproduce keep their stock forward."""

    def __init__(self, root: torch.nn.Module, isa: str | None = None) -> None:
        for parent in list(root.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear) and not isinstance(child, KernelLinear) and _covered(child):
                    setattr(parent, name, KernelLinear.adopt(child))
        self.modules = [m for m in root.modules() if isinstance(m, KernelLinear)]
        self.isa = isa
        self._chunks: dict[tuple[Any, ...], Chunking | None] = {}

    @contextlib.contextmanager
    def installed(self, block_shape: tuple[int, int]) -> Iterator[set[torch.nn.Module]]:
        """Within (this context only): every covered layer with a matching chunking computes [B, L, K] inputs with
        the kernel; yields those layers."""
        kernel = load_kernel(self.isa)
        chunkings: dict[torch.nn.Module, Chunking] = {}
        if kernel is not None:
            for module in self.modules:
                chunking = self._chunking(kernel, module, block_shape) if _covered(module) else None
                if chunking is not None:
                    chunkings[module] = chunking
        token = _BLOCK_ROUTE.set(_BlockRoute(kernel, chunkings, block_shape) if chunkings else None)
        try:
            yield set(chunkings)
        finally:
            _BLOCK_ROUTE.reset(token)

    def _chunking(self, kernel: Any, module: torch.nn.Linear, block_shape: tuple[int, int]) -> Chunking | None:
        outs, width = module.weight.shape
        key = (outs, width, block_shape, torch.get_num_threads())
        if key not in self._chunks:
            with torch.no_grad():
                probe = _probe_block(block_shape, width)
                weight = module.weight.detach()
                reference = module(probe).reshape(-1, outs)  # its stock forward: what the exact engine runs
                flat = probe.reshape(-1, width)

                def run(chunking: Chunking, full: bool) -> torch.Tensor:
                    used = weight if full else weight[:PROBE_COLUMNS]
                    return kernel.chunked_linear(flat, used, list(chunking.ends), list(chunking.groups))

                self._chunks[key] = find_chunking(run, reference, width)
            _record_path(f"linear {width} -> {outs}", block_shape, self._chunks[key])
        return self._chunks[key]


def _probe_block(block_shape: tuple[int, int], width: int) -> torch.Tensor:
    """The random [B, L, width] rows a chunking is probed on (fixed seed: the same probe every time)."""
    return torch.randn(*block_shape, width, generator=torch.Generator().manual_seed(0))


def _covered(module: torch.nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (
        weight is not None
        and weight.dtype == torch.float32
        and weight.device.type == "cpu"
        and weight.dim() == 2
        and weight.is_contiguous()
        and getattr(module, "bias", None) is None
    )
