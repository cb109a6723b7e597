"""A tiny model for the `terminal-gen` env's `echo-word` family (experimental).

`echo-word` asks "Write the word pebble87 into the file notes.txt."; the command that solves
it copies words from the instruction (`<bash>echo pebble87 > notes.txt</bash>`). A randomly
initialised model cannot copy, so, as `lookup-tiny` is warmed up on an echo corpus, this
model is warmed up by next-token training on transcripts of the same shape over *other*
words and file names (`WARM_WORDS`, `WARM_STEMS`: none is a word or file name of any
`echo-word` task) plus `repeat W N S` lines over the family's words, then saved with its
tokenizer as a model directory (`model.source: pretrained`). The warm-up never sees a task
of the family, so RL would have to learn to copy the family's own words.

Status, measured (issue 18 item 5 is not done): at 64 wide and 2 layers the warm-up learns
to copy its own words (loss 0.07, up to 27% of replies exact after 1,500 steps of 32) but
copies none of the family's words (0% exact on held-out `echo-word` transcripts), so RL from
this model has no signal yet.

The tokenizer is word-level over a closed vocabulary: each letter run, number, space and
punctuation mark is one token (unknown words become `<unk>`), and decoding concatenates, so
replies come back as the exact text the env parses.
"""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.envs.terminal_gen.env import BRIEF_PROMPT
from skyrl_gym.envs.terminal_gen.families import STEMS, WORDS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

TERMINAL_TINY_VERSION = "2"
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")
WARM_WORDS = (
    "apple", "banjo", "candle", "dragon", "engine", "forest", "guitar", "hammer", "island",
    "jacket", "kettle", "ladder", "magnet", "napkin", "orange", "pencil", "rabbit", "saddle",
    "tablet", "unicorn", "valley", "window", "yogurt", "zipper", "anchor", "bucket", "carpet",
    "donkey", "feather", "goblet",
)  # fmt: skip
WARM_STEMS = ("plan", "todo", "info", "stats", "items", "names", "prices", "scores", "dates")
PROMPT_WORDS = (
    "system", "user", "assistant", "Write", "the", "word", "into", "file", "txt", "echo",
    "bash", "answer", "done", "observation", "no", "output", "Run", "then", "command", "In",
    "a", "shell", "in", "app", "Do", "task", "by", "running", "and", "finish", "with", "repeat",
)  # fmt: skip
PATTERN = r"[A-Za-z_]+|\d+|[^A-Za-z_\d]"
"""Pre-tokenizer: letter runs, digit runs and single other characters."""

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def terminal_tokenizer() -> PreTrainedTokenizerFast:
    """The closed word-level tokenizer (about 200 ids) with a ChatML template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    from skyrl_sdk.agents.tiny import wrap_tokenizer

    chars = [c for c in string.printable if c not in "\x0b\x0c\r\t" and not c.isalpha()]
    chars += [str(n) for n in range(10, 1000)]  # numbers 0-999 are one token each
    words = dict.fromkeys((*PROMPT_WORDS, *WORDS, *STEMS, *WARM_WORDS, *WARM_STEMS))
    vocab = {t: i for i, t in enumerate(dict.fromkeys((*SPECIAL, *chars, *words)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PATTERN), behavior="isolated")
    core.decoder = decoders.Fuse()
    return wrap_tokenizer(
        core, chat_template=CHAT_TEMPLATE, special_tokens=("<|im_start|>", "<unk>")
    )


def warmup_corpus(n: int, seed: int = 0, repeat_share: float = 0.5) -> list[list[dict[str, str]]]:
    """`n` transcripts: shaped like `echo-word` episodes over the warm-up words only, or (a
    `repeat_share` of them) `repeat W N S` -> `W N S` over the family's own words, which
    teaches copying those words but nothing of the task."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < repeat_share:
            said = f"{rng.choice(WORDS)} {rng.randint(10, 999)} {rng.choice(STEMS)}"
            out.append(
                [
                    {"role": "system", "content": BRIEF_PROMPT},
                    {"role": "user", "content": f"repeat {said}"},
                    {"role": "assistant", "content": said},
                ]
            )
            continue
        word = f"{rng.choice(WARM_WORDS)}{rng.randint(10, 999)}"
        name = f"{rng.choice(WARM_STEMS)}.txt"
        out.append(
            [
                {"role": "system", "content": BRIEF_PROMPT},
                {"role": "user", "content": f"Write the word {word} into the file {name}."},
                {
                    "role": "assistant",
                    "content": f"<bash>echo {word} > {name}</bash><answer>done</answer>",
                },
            ]
        )
    return out


def _encode(tokenizer: Any, chat: list[dict[str, str]]) -> tuple[list[int], int]:
    """Token ids of a transcript and where the assistant's reply starts."""
    prompt = tokenizer.apply_chat_template(chat[:-1], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    start = len(tokenizer.encode(prompt, add_special_tokens=False))
    return tokenizer.encode(full, add_special_tokens=False), start


def copy_accuracy(model: Any, tokenizer: Any, chats: list[list[dict[str, str]]]) -> float:
    """Fraction of `chats` whose whole reply the model gives greedily (teacher-forced argmax)."""
    import torch

    hits = 0
    model.eval()
    with torch.no_grad():
        for chat in chats:
            ids, start = _encode(tokenizer, chat)
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            pred = logits[start - 1 : len(ids) - 2].argmax(-1)
            hits += bool((pred == torch.tensor(ids[start : len(ids) - 1])).all())
    model.train()
    return hits / len(chats)


def warm_up(
    model: Any,
    tokenizer: Any,
    *,
    steps: int,
    seed: int = 0,
    batch_size: int = 32,
    lr: float = 3e-3,
    check_every: int = 50,
    target: float = 0.9,
) -> float:
    """Next-token training on `warmup_corpus` (loss on the reply only) until the model gives
    `target` of held-back warm-up replies exactly (at most `steps` steps). Returns that
    accuracy."""
    import torch

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    probe = warmup_corpus(64, seed + 10_000)
    model.train()
    accuracy = 0.0
    for step in range(steps):
        encoded = [_encode(tokenizer, c) for c in warmup_corpus(batch_size, seed * 100_003 + step)]
        width = max(len(ids) for ids, _ in encoded)
        pad = tokenizer.pad_token_id
        batch = torch.full((len(encoded), width), pad)
        labels = torch.full((len(encoded), width), -100)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, (ids, start) in enumerate(encoded):
            batch[i, : len(ids)] = torch.tensor(ids)
            labels[i, start : len(ids)] = torch.tensor(ids[start:])
            mask[i, : len(ids)] = 1
        loss = model(input_ids=batch, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % check_every == 0:
            accuracy = copy_accuracy(model, tokenizer, probe)
            if accuracy >= target:
                break
    model.eval()
    return accuracy


def build_llama(
    vocab_size: int, hidden_size: int, num_layers: int, seed: int, tokenizer: Any
) -> Any:
    """A randomly initialised tiny Llama. (Llama, not Qwen2 as in `agents.tiny`: transformers'
    AutoTokenizer loads a Qwen2 directory's tokenizer as Qwen2's byte-level class, which would
    replace this word-level pre-tokenizer; a Llama directory keeps tokenizer.json as saved.)"""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def terminal_tiny_dir(
    *, hidden_size: int = 64, num_layers: int = 2, warmup_steps: int = 600, seed: int = 0
) -> Path:
    """Build (once per machine and settings) the warmed-up tiny model; return its directory
    (`$SKYRL_CACHE/terminal-tiny-v<N>-...`), loadable as `model.source: pretrained`."""

    def build(staging: Path) -> None:
        tokenizer = terminal_tokenizer()
        model = build_llama(len(tokenizer), hidden_size, num_layers, seed, tokenizer)
        if warmup_steps:
            warm_up(model, tokenizer, steps=warmup_steps, seed=seed)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    name = (
        f"terminal-tiny-v{TERMINAL_TINY_VERSION}-h{hidden_size}-l{num_layers}"
        f"-w{warmup_steps}-s{seed}"
    )
    return build_once(cache_dir() / name, build)
