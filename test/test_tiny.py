"""Tiny checkpoints: real format, real token ids, deterministic from the seed, loadable by the engine."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from core_helpers import tiny_checkpoint

from wam_diff2_ros.core.checkpoint import inspect_checkpoint, load_processor
from wam_diff2_ros.demo.tiny import make_tiny_checkpoint

pytestmark = pytest.mark.core


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a = make_tiny_checkpoint(tmp_path / "a", seed=3)
    b = make_tiny_checkpoint(tmp_path / "b", seed=3)
    c = make_tiny_checkpoint(tmp_path / "c", seed=4)
    assert _digest(a / "model.safetensors") == _digest(b / "model.safetensors")
    assert _digest(a / "model.safetensors") != _digest(c / "model.safetensors")
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())


def test_real_format_files():
    path = tiny_checkpoint()
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "wam_diff2"
    assert config["text_config"]["vocab_size"] == 151936
    assert config["image_token_id"] == 151655 and config["vision_start_token_id"] == 151652
    assert config["tie_word_embeddings"] is True
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
                 "chat_template.json", "video_preprocessor_config.json"):  # fmt: skip
        assert (path / name).is_file(), name
    assert "<|image_pad|>" in json.loads((path / "chat_template.json").read_text())["chat_template"]


@pytest.mark.parametrize(
    ("token", "token_id"),
    [
        ("<|im_end|>", 151645),
        ("<|vision_start|>", 151652),
        ("<|vision_end|>", 151653),
        ("<|image_pad|>", 151655),
        ("<|video_pad|>", 151656),
        ("<|im_start|>", 151644),
        ("<|endoftext|>", 151643),
    ],
)
def test_special_tokens_at_their_real_ids(token, token_id):
    tokenizer = load_processor(inspect_checkpoint(tiny_checkpoint())).tokenizer
    assert tokenizer.convert_tokens_to_ids(token) == token_id
    assert tokenizer.eos_token == "<|im_end|>"


def test_mask_id_is_an_embedding_row_but_not_a_token():
    info = inspect_checkpoint(tiny_checkpoint())
    assert info.tensors["model.language_model.embed_tokens.weight"].shape[0] > 151671
    tokenizer = load_processor(info).tokenizer
    assert len(tokenizer) <= 151671  # 151671 is a raw id, like in the reference
    assert tokenizer.decode([151671, 15], skip_special_tokens=True) == tokenizer.decode([15])


def test_sharded_tiny_checkpoint_has_an_index(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "s", seed=0, shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert len(inspect_checkpoint(path).weight_files) == 2


def test_console_command(tmp_path):
    out = tmp_path / "cli"
    result = subprocess.run(
        [sys.executable, "-m", "wam_diff2_ros.cli.make_tiny", str(out), "--seed", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _digest(out / "model.safetensors") == _digest(
        make_tiny_checkpoint(tmp_path / "lib", seed=3) / "model.safetensors"
    )
    again = subprocess.run(
        [sys.executable, "-m", "wam_diff2_ros.cli.make_tiny", str(out)], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 2 and "not empty" in again.stderr
