"""The embedded demo model: compact trained weights shipped with the package, expanded on first use.

`wam_diff2_ros/demo/weights/` holds a tiny WAM-Diff2 model trained by `wam-diff2-train-demo` (see
`wam_diff2_ros/demo/train/`) with the masked block-diffusion objective on synthetic NAVSIM-style
samples. It ships as compact weights: every tensor except the token embedding, plus only the embedding rows
of the tokens that occur in training (all other rows of the real 151936-token vocabulary are exactly zero),
stored in float16. `demo_checkpoint()` expands them into a complete real-format checkpoint directory
(config.json with `model_type: wam_diff2`, float32 `model.safetensors`, the real Qwen3 tokenizer files,
preprocessor config, chat template) under the cache root, once: the bytes are the same every time and the
weights' sha256 is checked against the manifest; the directory is written under a temporary name and renamed
into place, so concurrent first uses are safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from wam_diff2_ros.core.cache import user_cache_root
from wam_diff2_ros.core.tokens import GENERATION_CONFIG

DEMO_DIR = Path(__file__).resolve().parent / "weights"
COMPACT_WEIGHTS = "demo_weights.safetensors"
MANIFEST = "manifest.json"
METRICS = "metrics.json"
FORMAT_VERSION = 1
EMBEDDING_NAME = "model.language_model.embed_tokens.weight"
VOCAB_IDS_NAME = "demo.vocab_ids"  # int64 ids of the stored embedding rows
EMBED_ROWS_NAME = "demo.embed_rows"

_DTYPE_CODES: dict[torch.dtype, str] = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.int64: "I64",
    torch.int32: "I32",
}


class DemoModelError(RuntimeError):
    """The shipped demo files are missing or corrupt, or the expanded checkpoint does not match them."""


# --------------------------------------------------------------------------------------------------
# A byte-for-byte deterministic safetensors writer (the format: u64 header length, JSON header,
# raw little-endian tensor data), so the expanded checkpoint does not depend on the safetensors version.


def write_safetensors(
    tensors: Mapping[str, torch.Tensor], path: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Write `tensors` as a safetensors file: names sorted, data in that order, header padded to 8 bytes."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    names = sorted(tensors)
    for name in names:
        tensor = tensors[name]
        if tensor.dtype not in _DTYPE_CODES:
            raise ValueError(f"tensor {name!r}: dtype {tensor.dtype} is not supported here")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPE_CODES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header_bytes = json.dumps(header, separators=(",", ":"), sort_keys=False).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header_bytes)))
        handle.write(header_bytes)
        for name in names:
            handle.write(tensors[name].detach().cpu().contiguous().numpy().tobytes())


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (safetensors' own reader; an unreadable file is a DemoModelError)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise DemoModelError(f"{path}: unreadable safetensors file ({exc})") from None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------
# Compact <-> full weights


def expand_state(
    compact: Mapping[str, torch.Tensor], vocab_size: int, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The full-vocabulary state dict (no `lm_head.weight`: it is tied) of compact weights."""
    if VOCAB_IDS_NAME not in compact or EMBED_ROWS_NAME not in compact:
        raise DemoModelError(f"compact weights lack {VOCAB_IDS_NAME!r} / {EMBED_ROWS_NAME!r}")
    ids = compact[VOCAB_IDS_NAME].to(torch.int64)
    rows = compact[EMBED_ROWS_NAME]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise DemoModelError(f"compact weights have token ids outside 0..{vocab_size - 1}")
    embedding = torch.zeros(vocab_size, rows.shape[1], dtype=dtype)
    embedding[ids] = rows.to(dtype)
    state = {
        name: tensor.to(dtype) for name, tensor in compact.items() if name not in (VOCAB_IDS_NAME, EMBED_ROWS_NAME)
    }
    state[EMBEDDING_NAME] = embedding
    return state


# --------------------------------------------------------------------------------------------------
# Materialising the checkpoint


def load_manifest(demo_dir: Path = DEMO_DIR) -> dict[str, Any]:
    """The shipped demo manifest (config, processor settings, sizes, sha256 of the expanded weights)."""
    path = Path(demo_dir) / MANIFEST
    if not path.is_file():
        raise DemoModelError(
            f"{path}: the demo model manifest is missing (was the package installed with its data files?)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DemoModelError(f"{path}: not valid JSON ({exc})") from None
    if manifest.get("format") != FORMAT_VERSION:
        raise DemoModelError(f"{path}: manifest format {manifest.get('format')!r}, this package reads {FORMAT_VERSION}")
    for key in ("config", "preprocessor_overrides", "vocab_size", "model_safetensors_sha256", "compact_sha256"):
        if key not in manifest:
            raise DemoModelError(f"{path}: manifest lacks {key!r}")
    return manifest


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_demo_checkpoint(out_dir: str | Path, demo_dir: Path = DEMO_DIR, verify: bool = True) -> Path:
    """Expand the shipped compact weights into a complete checkpoint directory `out_dir` (created)."""
    from .tiny import write_processor_files, write_tokenizer_files

    demo_dir = Path(demo_dir)
    manifest = load_manifest(demo_dir)
    compact_path = demo_dir / COMPACT_WEIGHTS
    if not compact_path.is_file():
        raise DemoModelError(f"{compact_path}: the demo model weights are missing")
    if verify and sha256_file(compact_path) != manifest["compact_sha256"]:
        raise DemoModelError(f"{compact_path}: sha256 differs from {MANIFEST} (corrupt or from another build)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {**manifest["config"], "torch_dtype": "float32"}
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", GENERATION_CONFIG)
    state = expand_state(read_safetensors(compact_path), int(manifest["vocab_size"]))
    weights = out / "model.safetensors"
    write_safetensors(state, weights)
    if verify:
        digest = sha256_file(weights)
        if digest != manifest["model_safetensors_sha256"]:
            raise DemoModelError(
                f"{weights}: expanded weights have sha256 {digest[:16]}…, the manifest says "
                f"{manifest['model_safetensors_sha256'][:16]}… (expansion is not reproducible here)"
            )
    write_tokenizer_files(out)
    write_processor_files(out, manifest["preprocessor_overrides"])
    return out


def _looks_complete(path: Path, manifest: Mapping[str, Any]) -> bool:
    weights = path / "model.safetensors"
    needed = ("config.json", "tokenizer.json", "preprocessor_config.json", "chat_template.json")
    if not weights.is_file() or not all((path / name).is_file() for name in needed):
        return False
    expected = manifest.get("model_safetensors_bytes")
    return expected is None or weights.stat().st_size == int(expected)


def demo_checkpoint(cache_dir: Path | None = None, demo_dir: Path = DEMO_DIR) -> Path:
    """Path of the demo checkpoint directory, expanding the shipped weights on first use (~1 s).

    The directory is `<cache root>/demo-<first 12 hex of the weights' sha256>/` with the cache root
    `cache_dir`, else `$WAM_DIFF2_CACHE`, else `~/.cache/wam_diff2_ros`. A complete directory is returned
    as is; a damaged one is replaced.
    """
    manifest = load_manifest(demo_dir)
    root = Path(cache_dir).expanduser() if cache_dir is not None else user_cache_root()
    final = root / f"demo-{manifest['model_safetensors_sha256'][:12]}"
    if _looks_complete(final, manifest):
        return final
    root.mkdir(parents=True, exist_ok=True)
    if final.exists():  # damaged (edited by hand, disk full earlier): move aside, then rebuild
        stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=root))
        with contextlib.suppress(OSError):  # another process moved or replaced it meanwhile
            final.rename(stale / "old")
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        staging.chmod(0o755)
        write_demo_checkpoint(staging, demo_dir)
        try:
            staging.rename(final)
        except OSError:
            if not _looks_complete(final, manifest):  # not a lost race: a real failure
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final
