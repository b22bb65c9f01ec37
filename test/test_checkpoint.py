"""Checkpoint validation and loading: real safetensors files, one clear error per broken checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from core_helpers import copy_checkpoint, tiny_checkpoint

from wam_diff2_ros.core.checkpoint import (
    CheckpointError,
    inspect_checkpoint,
    load_model,
    resolve_device,
    resolve_dtype,
)
from wam_diff2_ros.core.model import qwen3vl_config, wam_diff2_2b_config

pytestmark = pytest.mark.core


def test_2b_architecture_has_the_published_parameter_count():
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(qwen3vl_config(wam_diff2_2b_config()))
    assert sum(p.numel() for p in model.parameters()) == 2_127_532_032
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight


def test_tiny_checkpoint_inspects_and_loads():
    info = inspect_checkpoint(tiny_checkpoint())
    assert info.config["model_type"] == "wam_diff2"
    assert "lm_head.weight" not in info.tensors  # tied to the embeddings
    assert info.tensors["model.language_model.embed_tokens.weight"].shape == (151936, 64)
    model = load_model(info, torch.device("cpu"), torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == info.num_parameters
    assert not model.training


def test_sharded_checkpoint_loads_the_same_weights():
    single = inspect_checkpoint(tiny_checkpoint(seed=5))
    sharded = inspect_checkpoint(tiny_checkpoint(seed=5, shards=3))
    assert len(sharded.weight_files) == 3
    a = load_model(single, torch.device("cpu"), torch.float32).state_dict()
    b = load_model(sharded, torch.device("cpu"), torch.float32).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("name", "dtype"), [("bf16", torch.bfloat16), ("float16", torch.float16)])
def test_loads_in_reduced_precision(name, dtype):
    model = load_model(inspect_checkpoint(tiny_checkpoint()), torch.device("cpu"), resolve_dtype(name))
    assert model.lm_head.weight.dtype == dtype


def _broken(tmp_path: Path, shards: int = 1) -> Path:
    return copy_checkpoint(tiny_checkpoint(seed=5, shards=shards) if shards > 1 else tiny_checkpoint(), tmp_path / "c")


def test_missing_shard(tmp_path):
    path = _broken(tmp_path, shards=3)
    (path / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model-00002-of-00003\.safetensors.*missing"):
        inspect_checkpoint(path)


def test_truncated_shard(tmp_path):
    path = _broken(tmp_path, shards=3)
    shard = path / "model-00001-of-00003.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model-00001-of-00003\.safetensors: truncated"):
        inspect_checkpoint(path)


def test_corrupt_header(tmp_path):
    path = _broken(tmp_path)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:40] = b"\xff" * 32
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt safetensors header"):
        inspect_checkpoint(path)


def test_tiny_file(tmp_path):
    path = _broken(tmp_path)
    (path / "model.safetensors").write_bytes(b"abc")
    with pytest.raises(CheckpointError, match="truncated"):
        inspect_checkpoint(path)


def test_wrong_model_type(tmp_path):
    path = _broken(tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "qwen3_vl"
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: model_type is 'qwen3_vl', expected 'wam_diff2'"):
        inspect_checkpoint(path)


def test_shape_mismatch_names_file_and_tensor(tmp_path):
    path = _broken(tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["text_config"]["intermediate_size"] = 200
    (path / "config.json").write_text(json.dumps(config))
    info = inspect_checkpoint(path)
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors: tensor '.*mlp.*' has shape \[\d+, \d+\], the config"
    ):
        load_model(info, torch.device("cpu"), torch.float32)


def test_missing_weight(tmp_path):
    from safetensors.torch import load_file, save_file

    path = _broken(tmp_path)
    state = load_file(str(path / "model.safetensors"))
    state.pop("model.language_model.norm.weight")
    save_file(state, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"1 weight.* missing.*norm\.weight"):
        load_model(inspect_checkpoint(path), torch.device("cpu"), torch.float32)


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        ("config.json", "config.json is missing"),
        ("preprocessor_config.json", "image preprocessor config is missing"),
        ("tokenizer.json", "tokenizer files missing"),
    ],
)
def test_missing_files(tmp_path, remove, message):
    path = _broken(tmp_path)
    (path / remove).unlink()
    if remove == "tokenizer.json":
        (path / "vocab.json").unlink()
    with pytest.raises(CheckpointError, match=message):
        inspect_checkpoint(path)


def test_text_only_chat_template_is_rejected(tmp_path):
    path = _broken(tmp_path)
    (path / "chat_template.json").unlink()
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = "{{ messages[0]['content'] }}"
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    with pytest.raises(CheckpointError, match="no vision chat template"):
        inspect_checkpoint(path)


def test_pickle_weights_are_never_loaded(tmp_path):
    path = _broken(tmp_path)
    (path / "model.safetensors").unlink()
    (path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(CheckpointError, match=r"pickle weights.*never loaded"):
        inspect_checkpoint(path)


def test_not_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        inspect_checkpoint(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        inspect_checkpoint(tmp_path / "file")


def test_cli_reports_a_broken_checkpoint_in_one_line(tmp_path):
    path = _broken(tmp_path, shards=3)
    (path / "model-00003-of-00003.safetensors").unlink()
    eval_json = tmp_path / "eval.json"
    eval_json.write_text(json.dumps([{"id": 1, "conversations": [{"from": "human", "value": "hi"}]}]))
    result = subprocess.run(
        [sys.executable, "-m", "wam_diff2_ros.cli.infer", "--model_id", str(path), "--input_file", str(eval_json),
         "--output_file", str(tmp_path / "out.json"), "--device", "cpu"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"wam-diff2-infer: error: {path}/model-00003-of-00003.safetensors: "
                     f"weight shard listed in model.safetensors.index.json is missing (1 missing)"]  # fmt: skip
    assert "Traceback" not in result.stderr


def test_device_resolution():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "npu")
    with pytest.raises(ValueError, match="expected auto, cpu"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="index"):
        resolve_device("cuda:x")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            resolve_device("cuda:0")
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="torch_npu is not installed"):
            resolve_device("npu")


def test_dtype_resolution():
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype("float32") is torch.float32
    assert resolve_dtype("half") is torch.float16
    with pytest.raises(ValueError, match="expected bfloat16"):
        resolve_dtype("int8")
