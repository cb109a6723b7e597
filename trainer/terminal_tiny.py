"""A tiny model for the `terminal-gen` env's `echo-word` family (experimental; issue 18 item 5
is NOT done: no learning test uses it yet, see Status).

`echo-word` asks "Write the word pebble87 into the file notes.txt."; the command that solves
it copies words from the instruction (`<bash>echo pebble87 > notes.txt</bash>`, then
`<answer>done</answer>`). `terminal_tiny_dir()` builds a tiny Llama (128 wide, 2 layers, tied
embeddings) with a brief supervised warm-up on the *train split only*: next-token training
(loss on the reply) on oracle transcripts of `echo-word` tasks with train-split seeds
(`WARMUP_OFFSET` onwards, so not even an RL run's first tasks), stopped as soon as the model's
probability of the exact oracle reply, averaged over held-back train transcripts, reaches
`target` (0.15). That probability is the model's success rate at temperature 1 (up to other
correct spellings), so the model succeeds sometimes, not always. Held-out tasks (seeds
1,000,000 onwards) never enter the warm-up; the generator guarantees no held-out instance
equals a train instance (the same words, stems and numbers recur, in new combinations).

Status, measured on the loaded 2-core box (session 5):
- Warm-up: about 700-725 steps of 32 (about 3 minutes here, cached with `build_once`). Held-out
  success of the warmed-up model at temperature 1 in the trainer's held-out evaluation: 28 of
  128 (0.219, 95% CI 0.156-0.298); greedy (teacher-forced argmax) 45% of held-out replies
  exact. Almost all remaining error is the number token (mean log-probability -2.69 there,
  above -0.05 at every other reply position): the word and the file name are copied.
- RL from it (AsyncTrainer, synchronous, GRPO, group 8, filter_zero_variance, terminal-gen
  train split, `brief`, one reply per episode, seed 0) did NOT raise held-out success in any
  of 13 configurations (start 0.219 in all; end after training): lr 1e-4 x12 steps 0.211;
  3e-4 x12 0.188; 5e-4 x30 0.180; 1e-3 x12 0.000; 1e-3 + KL 0.05 x30 0.062; 1e-3 + KL 0.5 x24
  0.148; 3e-3 + KL 1.0 (8 groups) x16 0.016; 16 groups/step: 1e-3 x15 0.156, 3e-3 x15 0.000;
  LoRA r8 on attention: 3e-3 x20 0.219, 1e-2 x20 0.164; max_tokens 25 (no room past the
  oracle reply): 1e-3 x24 0.078, 3e-4 x24 0.195; 16 groups of 4: 5e-4 x20 0.133, LoRA r8
  on every linear layer 3e-3 x20 0.188. Learner and sampler agree (kl_sampler ~0,
  ratio 1), so it is not an off-policy bug. What the trained policies do instead: at larger
  learning rates they stop ending the turn (text after `</answer>`), break the tag
  (`<answer50`), or repeat words and numbers that earned reward in training (`iris255` in
  replies to other tasks), i.e. RL on a few tasks per step reinforces the literal tokens of
  successful replies (tied embeddings, full fine-tune) faster than it improves copying; at
  smaller ones nothing moves in the steps a test can afford.
- Tried and dropped for the warm-up: transcripts over *other* words (30 or 500 made-up words,
  never the family's): the model copies those but 0% of the family's words; the same with the
  copied tokens' embeddings frozen at their random initial values: no copying at all within
  800 steps; digits as single tokens (numbers spelled digit by digit): no copying within 1,500
  steps.

The tokenizer is word-level over a closed vocabulary: each letter run, number (0-999), space
and punctuation mark is one token (unknown words become `<unk>`), and decoding concatenates, so
replies come back as the exact text the env parses.
"""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.envs.terminal_gen.env import BRIEF_PROMPT
from skyrl_gym.envs.terminal_gen.families import STEMS, WORDS, make_spec
from skyrl_gym.envs.terminal_gen.generate import SPLITS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

TERMINAL_TINY_VERSION = "3"
"""Bump when the tokenizer, the model or the warm-up changes (the cache key)."""
FAMILY = "echo-word"
"""The family the model is warmed up on."""
WARMUP_OFFSET = 100_000
"""The warm-up's tasks are train-split seeds from this offset on (the RL run's env serves the
first `per_family` train seeds, far below it)."""
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")
PROMPT_WORDS = (
    "system", "user", "assistant", "Write", "the", "word", "into", "file", "txt", "echo",
    "bash", "answer", "done", "observation", "no", "output", "Run", "then", "command", "In",
    "a", "shell", "in", "app", "Do", "task", "by", "running", "and", "finish", "with",
)  # fmt: skip
PATTERN = r"[A-Za-z_]+|\d+|[^A-Za-z_\d]"
"""Pre-tokenizer: letter runs, digit runs and single other characters."""

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def terminal_tokenizer() -> PreTrainedTokenizerFast:
    """The closed word-level tokenizer (about 1,130 ids) with a ChatML template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    from skyrl_sdk.agents.tiny import wrap_tokenizer

    chars = [c for c in string.printable if c not in "\x0b\x0c\r\t" and not c.isalpha()]
    chars += [str(n) for n in range(10, 1000)]  # numbers 0-999 are one token each
    words = dict.fromkeys((*PROMPT_WORDS, *WORDS, *STEMS))
    vocab = {t: i for i, t in enumerate(dict.fromkeys((*SPECIAL, *chars, *words)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PATTERN), behavior="isolated")
    core.decoder = decoders.Fuse()
    return wrap_tokenizer(
        core, chat_template=CHAT_TEMPLATE, special_tokens=("<|im_start|>", "<unk>")
    )


def oracle_transcript(seed: int) -> list[dict[str, str]]:
    """The brief-prompt episode of `echo-word` task `seed`, answered by its oracle in one reply."""
    spec = make_spec(FAMILY, seed)
    command = spec.solution.strip()
    return [
        {"role": "system", "content": BRIEF_PROMPT},
        {"role": "user", "content": spec.instruction},
        {"role": "assistant", "content": f"<bash>{command}</bash><answer>done</answer>"},
    ]


def warmup_corpus(n: int, offset: int = 0) -> list[list[dict[str, str]]]:
    """Oracle transcripts of `n` train-split tasks, from seed `WARMUP_OFFSET + offset` on."""
    return [oracle_transcript(s) for s in SPLITS["train"].seeds(n, WARMUP_OFFSET + offset)]


def _encode(tokenizer: Any, chat: list[dict[str, str]]) -> tuple[list[int], int]:
    """Token ids of a transcript and where the assistant's reply starts."""
    prompt = tokenizer.apply_chat_template(chat[:-1], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    start = len(tokenizer.encode(prompt, add_special_tokens=False))
    return tokenizer.encode(full, add_special_tokens=False), start


def reply_probability(model: Any, tokenizer: Any, chats: list[list[dict[str, str]]]) -> float:
    """Mean probability that the model, sampling at temperature 1, gives each transcript's
    reply exactly (up to and including `<|im_end|>`)."""
    import torch

    total = 0.0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for chat in chats:
            ids, start = _encode(tokenizer, chat)
            ids = ids[:-1]  # the template's trailing newline after <|im_end|>
            logits = model(input_ids=torch.tensor([ids])).logits[0, start - 1 : len(ids) - 1]
            gold = torch.tensor(ids[start:])
            total += logits.log_softmax(-1).gather(1, gold[:, None]).sum().exp().item()
    model.train(was_training)
    return total / len(chats)


def warm_up(
    model: Any,
    tokenizer: Any,
    *,
    max_steps: int,
    target: float,
    seed: int = 0,
    batch_size: int = 32,
    lr: float = 3e-3,
    check_every: int = 25,
) -> tuple[int, float]:
    """Next-token training on `warmup_corpus` (loss on the reply only) until the mean exact-
    reply probability on 64 held-back train transcripts reaches `target` (at most `max_steps`
    steps). Returns (steps taken, that probability)."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    probe = warmup_corpus(64)
    pool = warmup_corpus(4096, offset=64)
    model.train()
    probability = 0.0
    step = 0
    while step < max_steps:
        encoded = [_encode(tokenizer, c) for c in rng.sample(pool, batch_size)]
        width = max(len(ids) for ids, _ in encoded)
        batch = torch.full((len(encoded), width), tokenizer.pad_token_id)
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
        step += 1
        if step % check_every == 0:
            probability = reply_probability(model, tokenizer, probe)
            if probability >= target:
                break
    model.eval()
    return step, probability


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
    *,
    hidden_size: int = 128,
    num_layers: int = 2,
    max_steps: int = 1500,
    target: float = 0.15,
    seed: int = 0,
) -> Path:
    """Build (once per machine and settings) the warmed-up tiny model; return its directory
    (`$SKYRL_CACHE/terminal-tiny-v<N>-...`), loadable as `model.source: pretrained`."""

    def build(staging: Path) -> None:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # deterministic and polite on shared CPUs
        try:
            tokenizer = terminal_tokenizer()
            model = build_llama(len(tokenizer), hidden_size, num_layers, seed, tokenizer)
            warm_up(model, tokenizer, max_steps=max_steps, target=target, seed=seed)
        finally:
            torch.set_num_threads(threads)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    name = (
        f"terminal-tiny-v{TERMINAL_TINY_VERSION}-h{hidden_size}-l{num_layers}"
        f"-m{max_steps}-t{target}-s{seed}"
    )
    return build_once(cache_dir() / name, build)
