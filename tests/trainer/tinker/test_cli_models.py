"""The server's built-in models are what their names say: `skyrl/lookup-tiny` is the `lookup`
env's word-level model (it once silently became the BPE `tiny` model when `model.source`'s
default changed, and `skyrl train backend=tinker` on the `lookup` env earned no reward)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_sdk.trainer.models import lookup_tokenizer
from skyrl_sdk.trainer.tinker.cli import lookup_tiny_dir


def test_lookup_tiny_serves_the_lookup_envs_word_level_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path))
    path = lookup_tiny_dir()
    served = AutoTokenizer.from_pretrained(path / "tokenizer")
    words = lookup_tokenizer()
    assert served.get_vocab() == words.get_vocab()
    assert served.encode("lookup", add_special_tokens=False) == words.encode(
        "lookup", add_special_tokens=False
    )
    config = json.loads((path / "config.json").read_text())
    assert config["vocab_size"] == len(words)
