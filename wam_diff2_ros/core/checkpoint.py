"""Find and validate a WAM-Diff2 checkpoint directory, then build the model and the processor.

A checkpoint directory holds `config.json` (`model_type: "wam_diff2"` with Qwen3-VL `text_config` and
`vision_config`), safetensors weights (`model.safetensors`, or shards plus `model.safetensors.index.json`),
tokenizer files, `preprocessor_config.json` and a vision chat template. Everything is checked before any
tensor is read, so a broken checkpoint gives one `CheckpointError` naming the file and the problem.
Weights are only ever read from safetensors, never from pickle files.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .image_preprocess import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, ImageProcessorConfig
from .model import WAM_DIFF2_MODEL_TYPE, qwen3vl_config
from .processor import WamDiff2Processor

LOG = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
SINGLE_WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PREPROCESSOR_FILE = "preprocessor_config.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_SAFETENSORS_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as declared in a safetensors header."""

    file: Path
    dtype: str
    shape: tuple[int, ...]


@dataclass
class CheckpointInfo:
    """A validated checkpoint directory (no tensor data read yet)."""

    path: Path
    config: dict[str, Any]
    weight_files: list[Path]
    tensors: dict[str, TensorEntry]
    chat_template: str
    chat_template_source: str
    preprocessor: ImageProcessorConfig
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """Directory name, used as the model name in messages and logs."""
        return self.path.name

    @property
    def num_parameters(self) -> int:
        """Parameters stored in the weight files."""
        total = 0
        for entry in self.tensors.values():
            count = 1
            for dim in entry.shape:
                count *= dim
            total += count
        return total


def _fail(path: Path, problem: str) -> CheckpointError:
    return CheckpointError(f"{path}: {problem}")


def read_safetensors_header(path: Path) -> dict[str, TensorEntry]:
    """Tensor names, dtypes and shapes of a safetensors file; checks the header and the file length."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise _fail(path, f"truncated safetensors file ({size} bytes, no header)")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8 or header_len > 100_000_000:
                raise _fail(path, f"corrupt safetensors header (declares {header_len} header bytes, file has {size})")
            raw = handle.read(header_len)
    except OSError as exc:
        raise _fail(path, f"cannot read weights: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _fail(path, "corrupt safetensors header (not valid JSON)") from None
    if not isinstance(header, dict):
        raise _fail(path, "corrupt safetensors header (not a JSON object)")
    entries: dict[str, TensorEntry] = {}
    data_end = 0
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(spec["dtype"])
            shape = tuple(int(d) for d in spec["shape"])
            start, end = (int(v) for v in spec["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise _fail(path, f"corrupt safetensors header entry for tensor {name!r}") from None
        width = _SAFETENSORS_DTYPES.get(dtype)
        count = 1
        for dim in shape:
            count *= dim
        if width is None or end - start != count * width or start < 0 or end < start:
            raise _fail(path, f"corrupt safetensors header entry for tensor {name!r} ({dtype}, {shape})")
        data_end = max(data_end, end)
        entries[name] = TensorEntry(file=path, dtype=dtype, shape=shape)
    expected = 8 + header_len + data_end
    if size < expected:
        raise _fail(path, f"truncated safetensors file: {size} bytes, the header needs {expected}")
    return entries


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(path, f"{what} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(path, f"{what} is not valid JSON ({exc})") from None


def _find_weights(root: Path) -> tuple[list[Path], dict[str, str] | None]:
    index_path = root / WEIGHTS_INDEX
    if index_path.exists():
        index = _read_json(index_path, "weights index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise _fail(index_path, "weights index has no 'weight_map'")
        shards = sorted({str(v) for v in weight_map.values()})
        missing = [s for s in shards if not (root / s).is_file()]
        if missing:
            raise _fail(
                root / missing[0], f"weight shard listed in {WEIGHTS_INDEX} is missing ({len(missing)} missing)"
            )
        return [root / s for s in shards], {str(k): str(v) for k, v in weight_map.items()}
    if (root / SINGLE_WEIGHTS).is_file():
        return [root / SINGLE_WEIGHTS], None
    shards = sorted(root.glob("*.safetensors"))
    if shards:
        raise _fail(root, f"{len(shards)} safetensors shards but no {WEIGHTS_INDEX}")
    pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise _fail(
            root,
            f"only pickle weights ({', '.join(pickles[:3])}); they are never loaded (unsafe). "
            "Convert them to safetensors first.",
        )
    raise _fail(root, f"no model weights ({SINGLE_WEIGHTS} or {WEIGHTS_INDEX})")


def _find_chat_template(root: Path) -> tuple[str, str]:
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), jinja.name
    as_json = root / "chat_template.json"
    if as_json.is_file():
        data = _read_json(as_json, "chat template")
        template = data.get("chat_template") if isinstance(data, dict) else None
        if isinstance(template, str) and template:
            return template, as_json.name
        raise _fail(as_json, "has no 'chat_template' string")
    for name in ("processor_config.json", "tokenizer_config.json"):
        candidate = root / name
        if candidate.is_file():
            data = _read_json(candidate, name)
            template = data.get("chat_template") if isinstance(data, dict) else None
            if isinstance(template, str) and "image" in template:
                return template, f"{name}:chat_template"
    raise _fail(root, "no vision chat template (chat_template.jinja / chat_template.json)")


def inspect_checkpoint(path: str | Path) -> CheckpointInfo:
    """Validate a checkpoint directory without loading tensors; raises `CheckpointError`."""
    root = Path(path).expanduser()
    if not root.exists():
        raise _fail(root, "checkpoint directory does not exist")
    if not root.is_dir():
        raise _fail(root, "is not a directory (a checkpoint is a directory with config.json)")
    root = root.resolve()
    config = _read_json(root / CONFIG_FILE, "config.json")
    if not isinstance(config, dict):
        raise _fail(root / CONFIG_FILE, "config.json is not a JSON object")
    model_type = config.get("model_type")
    if model_type != WAM_DIFF2_MODEL_TYPE:
        raise _fail(root / CONFIG_FILE, f"model_type is {model_type!r}, expected {WAM_DIFF2_MODEL_TYPE!r}")
    for key in ("text_config", "vision_config"):
        if not isinstance(config.get(key), dict):
            raise _fail(root / CONFIG_FILE, f"'{key}' is missing or not an object")

    files, weight_map = _find_weights(root)
    tensors: dict[str, TensorEntry] = {}
    for file in files:
        for name, entry in read_safetensors_header(file).items():
            if name in tensors:
                raise _fail(file, f"tensor {name!r} also stored in {tensors[name].file.name}")
            tensors[name] = entry
    if weight_map is not None:
        for name, shard in weight_map.items():
            entry = tensors.get(name)
            if entry is None or entry.file.name != Path(shard).name:
                raise _fail(root / shard, f"tensor {name!r} listed in {WEIGHTS_INDEX} is not in this shard")

    if not (root / "tokenizer.json").is_file() and not (
        (root / "vocab.json").is_file() and (root / "merges.txt").is_file()
    ):
        raise _fail(root, "tokenizer files missing (tokenizer.json, or vocab.json + merges.txt)")
    preprocessor = ImageProcessorConfig.from_dict(_read_json(root / PREPROCESSOR_FILE, "image preprocessor config"))
    template, source = _find_chat_template(root)
    return CheckpointInfo(
        path=root,
        config=config,
        weight_files=files,
        tensors=tensors,
        chat_template=template,
        chat_template_source=source,
        preprocessor=preprocessor,
    )


def _npu_runtime_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # noqa: F401

        return bool(torch.npu.is_available())
    except Exception:
        return False


def resolve_device(spec: str = "auto") -> torch.device:
    """`auto` | `cpu` | `cuda[:N]` | `npu[:N]` -> a usable torch device (clear error when it is not)."""
    text = (spec or "auto").strip().lower()
    if text == "auto":
        if _npu_runtime_available():
            return torch.device("npu:0")
        if torch.cuda.is_available():
            return torch.device("cuda:0")
        return torch.device("cpu")
    kind, _, index_text = text.partition(":")
    if index_text and not index_text.isdigit():
        raise ValueError(f"device {spec!r}: the index after ':' must be a number")
    index = int(index_text) if index_text else 0
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            raise RuntimeError(f"device {spec!r}: CUDA is not available (this torch is {build}, or no GPU is visible)")
        if index >= torch.cuda.device_count():
            raise RuntimeError(f"device {spec!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
        return torch.device("cuda", index)
    if kind == "npu":
        if importlib.util.find_spec("torch_npu") is None:
            raise RuntimeError(
                f"device {spec!r}: torch_npu is not installed. On an Ascend machine install the torch_npu build "
                "matching your torch (pip install torch-npu==<torch version>) and source CANN's set_env.sh."
            )
        try:
            import torch_npu  # noqa: F401
        except Exception as exc:
            raise RuntimeError(f"device {spec!r}: torch_npu failed to import ({exc}); check the CANN setup") from None
        if not torch.npu.is_available() or index >= torch.npu.device_count():
            raise RuntimeError(f"device {spec!r}: no such Ascend NPU is visible")
        return torch.device("npu", index)
    raise ValueError(f"device {spec!r}: expected auto, cpu, cuda[:N] or npu[:N]")


_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}  # fmt: skip


def release_device_cache(device: Any) -> None:
    """Return cached, unused accelerator memory to the driver (no-op on CPU): after dropping a model."""
    kind = getattr(device, "type", str(device))
    if kind == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()
    elif kind == "npu" and hasattr(torch, "npu"):
        torch.npu.empty_cache()


def default_dtype(device: str, configured: str) -> str:
    """The dtype of a run that asked for none: float32 on a CPU (bfloat16 and float16 have no CPU units), else
    ``configured`` (``model.dtype``). The one rule of the replay, the closed loop and the egodriver policy;
    raises ``ValueError`` / ``RuntimeError`` for a device that cannot be used (:func:`resolve_device`)."""
    return "float32" if resolve_device(device).type == "cpu" else configured


def resolve_dtype(spec: str | torch.dtype = "bfloat16") -> torch.dtype:
    """`bf16`/`bfloat16`, `fp16`/`float16`, `fp32`/`float32` -> torch dtype."""
    if isinstance(spec, torch.dtype):
        if spec not in _DTYPES.values():
            raise ValueError(f"dtype {spec} is not supported (bfloat16, float16, float32)")
        return spec
    dtype = _DTYPES.get(str(spec).strip().lower())
    if dtype is None:
        raise ValueError(f"dtype {spec!r}: expected bfloat16, float16 or float32")
    return dtype


def synchronizer(device: torch.device):
    """A no-argument function that waits for queued work on `device` (no-op on CPU)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "npu":
        return lambda: torch.npu.synchronize(device)
    return lambda: None


def _check_tensors_against_model(info: CheckpointInfo, model_config: Any) -> None:
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        skeleton = Qwen3VLForConditionalGeneration(model_config)
    expected = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    tied = bool(getattr(model_config, "tie_word_embeddings", False))
    for name, shape in expected.items():
        entry = info.tensors.get(name)
        if entry is None:
            if tied and name == "lm_head.weight":
                continue
            missing = [n for n in expected if n not in info.tensors and not (tied and n == "lm_head.weight")]
            raise _fail(info.path, f"{len(missing)} weight(s) missing from the safetensors files, e.g. {missing[0]!r}")
        if entry.shape != shape:
            raise _fail(entry.file, f"tensor {name!r} has shape {list(entry.shape)}, the config needs {list(shape)}")
    unexpected = [n for n in info.tensors if n not in expected]
    if unexpected:
        info.notes.append(f"{len(unexpected)} unused tensor(s) in the checkpoint, e.g. {unexpected[0]!r}")
        LOG.warning("%s: %s", info.path, info.notes[-1])


def load_model(info: CheckpointInfo, device: torch.device, dtype: torch.dtype) -> Any:
    """transformers Qwen3-VL model with the checkpoint's weights, in eval mode on `device`."""
    from transformers import Qwen3VLForConditionalGeneration
    from transformers.utils import logging as hf_logging

    try:
        model_config = qwen3vl_config(info.config)
    except Exception as exc:
        raise _fail(info.path / CONFIG_FILE, f"not a valid Qwen3-VL configuration ({exc})") from None
    _check_tensors_against_model(info, model_config)
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model = Qwen3VLForConditionalGeneration.from_pretrained(
            str(info.path), config=model_config, dtype=dtype, attn_implementation="sdpa", local_files_only=True
        )
    except Exception as exc:
        raise _fail(info.path, f"loading the weights failed: {exc}") from None
    finally:
        hf_logging.set_verbosity(previous)
        hf_logging.enable_progress_bar()
    return model.to(device).eval()


def load_processor(
    info: CheckpointInfo, min_pixels: int = DEFAULT_MIN_PIXELS, max_pixels: int = DEFAULT_MAX_PIXELS
) -> WamDiff2Processor:
    """Tokenizer + chat template + image preprocessing of the checkpoint."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(info.path), local_files_only=True)
    except Exception as exc:
        raise _fail(info.path, f"tokenizer failed to load: {exc}") from None
    finally:
        hf_logging.set_verbosity(previous)
    return WamDiff2Processor(tokenizer, info.chat_template, info.preprocessor, min_pixels, max_pixels)
