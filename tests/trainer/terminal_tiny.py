"""A tiny model for the `terminal-gen` env's `echo-word` family, for the learning test
(`tests/trainer/test_terminal_tiny_learning.py`, issue 18 item 5). Test-only: nothing outside
`tests/` uses it (it was `skyrl_sdk.trainer.terminal_tiny` until issue 26).

`echo-word` asks "Write the word pebble87 into the file notes.txt."; the command that solves
it copies words from the instruction (`<bash>echo pebble87 > notes.txt</bash>`, then
`<answer>done</answer>`). `terminal_tiny_dir()` builds a tiny Llama (128 wide, 2 layers, tied
embeddings; value and output projections start as the identity, a copying prior, see
`build_llama`) and warms it up on the *train split only*: next-token training (loss on the
reply) on `echo-word` tasks with train-split seeds (`WARMUP_OFFSET` onwards, so not even an
RL run's first tasks), answered by a mixed-quality demonstrator: the oracle's reply in
`ORACLE_SHARE` (30%) of transcripts, otherwise a plausible wrong reply that copies the same
words (`wrong_replies`: print the word, write it to `<word>.txt`, `cat` or `touch` the file,
`ls`). The warm-up stops once the model's probability of the exact oracle reply, averaged over
64 held-back train transcripts, reaches `target` (0.2): the model then copies well and picks
the oracle's command about as often as its demonstrator did, so it succeeds sometimes, not
always. Held-out tasks (seeds 1,000,000 onwards) never enter the warm-up; the generator
guarantees no held-out instance equals a train instance (the same words, stems and numbers
recur, in new combinations).

Why a mixed demonstrator: what RL can improve in a few steps is a *choice* the model already
makes sometimes, and one that is the same across tasks (write the word into the named file,
not print it or touch the file), so it carries over to held-out tasks. A previous version
(session 5) warmed up on oracle replies only, stopped at 15% exact-reply probability: its
errors were almost all the copied number (990 possible tokens), and GRPO did not raise
held-out success in 13 configurations (lr 1e-4 to 1e-2, KL, LoRA, groups of 4 to 16): it
reinforced the literal words and numbers of rewarded replies instead of better copying.

Measured on the loaded 2-core box, one torch thread (session 6): the warm-up stops after 900
steps of 32 (about 190 s; cached with `build_once`) at exact-reply probability 0.206. The
learning test then runs GRPO (AsyncTrainer, synchronous, group 8, 4 groups per step, lr 3e-4,
filter_zero_variance, 20 steps, one reply per episode) on the train split and evaluates 128
held-out tasks at temperature 1 before and after: success 0.156 -> 0.516 with RL seed 0 (the
test's), 0.227 -> 0.516 with seed 1, 0.258 -> 0.469 with seed 2 (+21 to +36 points; the 95%
Wilson intervals do not overlap in any). With 12 steps the rise was smaller and less sure
(0.156 -> 0.422, 0.227 -> 0.406, 0.258 -> 0.383). The test takes about 140 s with the model
cached, about 5-6 minutes with the warm-up.

Tried and dropped for the warm-up: random value/output projections (no copying at all within
700 steps, with or without query/key biases; a GPT-2 with learned positions: none within 275);
lr 5e-3 (no copying within 900 steps); transcripts over *other* words (the model copies those
but 0% of the family's words); digits as single tokens (no copying within 1,500 steps).

The tokenizer is word-level over a closed vocabulary: each letter run, number (0-999), space
and punctuation mark is one token (unknown words become `<unk>`), and decoding concatenates, so
replies come back as the exact text the env parses.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.envs.terminal_gen.env import BRIEF_PROMPT
from skyrl_gym.envs.terminal_gen.families import STEMS, WORDS, make_spec
from skyrl_gym.envs.terminal_gen.generate import SPLITS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

TERMINAL_TINY_VERSION = "5"
"""Bump when the tokenizer, the model or the warm-up changes (the cache key)."""
FAMILY = "echo-word"
"""The family the model is warmed up on."""
ORACLE_SHARE = 0.3
"""Share of the warm-up's demonstrations that are the oracle's reply (the rest are
`wrong_replies`)."""
WARMUP_OFFSET = 100_000
"""The warm-up's tasks are train-split seeds from this offset on (the RL run's env serves the
first `per_family` train seeds, far below it)."""
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")
PROMPT_WORDS = (
    "system", "user", "assistant", "Write", "the", "word", "into", "file", "txt", "echo",
    "bash", "answer", "done", "observation", "no", "output", "Run", "then", "command", "In",
    "a", "shell", "in", "app", "Do", "task", "by", "running", "and", "finish", "with",
    "cat", "ls", "touch",
)  # fmt: skip
PATTERN = r"[A-Za-z_]+|\d+|[^A-Za-z_\d]"
"""Pre-tokenizer: letter runs, digit runs and single other characters."""
COPIED = frozenset((*WORDS, *STEMS))
"""Tokens a reply copies from the instruction (with the numbers)."""

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


def _chat(seed: int, reply: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": BRIEF_PROMPT},
        {"role": "user", "content": make_spec(FAMILY, seed).instruction},
        {"role": "assistant", "content": reply},
    ]


def oracle_transcript(seed: int) -> list[dict[str, str]]:
    """The brief-prompt episode of `echo-word` task `seed`, answered by its oracle in one reply."""
    command = make_spec(FAMILY, seed).solution.strip()
    return _chat(seed, f"<bash>{command}</bash><answer>done</answer>")


def wrong_replies(seed: int) -> tuple[str, ...]:
    """Plausible replies to task `seed` that copy its words but fail its verifier: print the
    word instead of writing it, write it to a file named after the word, read the file,
    create it empty, list the directory."""
    words = make_spec(FAMILY, seed).instruction.rstrip(".").split()
    word, name = words[3], words[-1]
    commands = (
        f"echo {word}",
        f"echo {word} > {word}.txt",
        f"cat {name}",
        f"touch {name}",
        "ls",
    )
    return tuple(f"<bash>{c}</bash><answer>done</answer>" for c in commands)


def demonstration(seed: int, oracle_share: float) -> list[dict[str, str]]:
    """Task `seed` answered by a mixed-quality demonstrator: the oracle with probability
    `oracle_share`, otherwise one of `wrong_replies` (drawn per seed, so reproducible)."""
    rng = random.Random(f"demonstrator-{seed}")
    if rng.random() < oracle_share:
        return oracle_transcript(seed)
    return _chat(seed, rng.choice(wrong_replies(seed)))


def warmup_corpus(n: int, offset: int = 0, oracle_share: float = 1.0) -> list[list[dict[str, str]]]:
    """`demonstration`s of `n` train-split tasks, from seed `WARMUP_OFFSET + offset` on
    (`oracle_share` 1: oracle transcripts only)."""
    seeds = SPLITS["train"].seeds(n, WARMUP_OFFSET + offset)
    return [demonstration(s, oracle_share) for s in seeds]


def _encode(tokenizer: Any, chat: list[dict[str, str]]) -> tuple[list[int], int]:
    """Token ids of a transcript and where the assistant's reply starts."""
    prompt = tokenizer.apply_chat_template(chat[:-1], tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(chat, tokenize=False)
    start = len(tokenizer.encode(prompt, add_special_tokens=False))
    return tokenizer.encode(full, add_special_tokens=False), start


def _batch(tokenizer: Any, encoded: list[tuple[list[int], int]]) -> tuple[Any, Any, Any]:
    """Right-padded input ids, attention mask and labels (-100 outside the replies)."""
    import torch

    width = max(len(ids) for ids, _ in encoded)
    batch = torch.full((len(encoded), width), tokenizer.pad_token_id)
    labels = torch.full((len(encoded), width), -100)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for i, (ids, start) in enumerate(encoded):
        batch[i, : len(ids)] = torch.tensor(ids)
        labels[i, start : len(ids)] = torch.tensor(ids[start:])
        mask[i, : len(ids)] = 1
    return batch, mask, labels


def _reply_logprobs(model: Any, batch: Any, mask: Any, labels: Any) -> tuple[Any, Any]:
    """Log-probabilities of the reply tokens (flat) and their labels; the vocabulary
    projection runs on reply positions only (most of a transcript is prompt)."""
    hidden = model.model(input_ids=batch, attention_mask=mask).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets != -100
    logits = model.lm_head(hidden[keep])
    return logits.log_softmax(-1).gather(1, targets[keep][:, None])[:, 0], keep


def reply_scores(
    model: Any, tokenizer: Any, chats: list[list[dict[str, str]]]
) -> tuple[float, float]:
    """Means over `chats` of (a) the probability that the model, sampling at temperature 1,
    gives the transcript's reply exactly (up to and including `<|im_end|>`) and (b) the
    probability of its copied tokens (the instruction's word, number and file stem) given
    the reply's other tokens: how well the model copies, whatever reply it prefers."""
    import torch

    copied = {i for t, i in tokenizer.get_vocab().items() if t in COPIED or t.isdigit()}
    encoded = []
    for chat in chats:
        ids, start = _encode(tokenizer, chat)
        encoded.append((ids[:-1], start))  # not the template's newline after <|im_end|>
    batch, mask, labels = _batch(tokenizer, encoded)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logp, keep = _reply_logprobs(model, batch, mask, labels)
    model.train(was_training)
    rows = keep.nonzero()[:, 0]
    is_copied = torch.tensor([int(i) in copied for i in labels[:, 1:][keep]])
    exact = torch.zeros(len(chats)).index_add_(0, rows, logp).exp()
    copy = torch.zeros(len(chats)).index_add_(0, rows, logp * is_copied).exp()
    return exact.mean().item(), copy.mean().item()


def warm_up(
    model: Any,
    tokenizer: Any,
    *,
    max_steps: int,
    target: float,
    oracle_share: float,
    seed: int = 0,
    batch_size: int = 32,
    lr: float = 3e-3,
    pool_size: int = 8192,
    check_every: int = 25,
    log: Callable[[int, float, float], None] | None = None,
) -> tuple[int, float]:
    """Next-token training on `warmup_corpus(..., oracle_share)` (loss on the reply only)
    until the mean exact-reply probability (`reply_scores`) of 64 held-back train-split
    oracle transcripts reaches `target` (at most `max_steps` steps). Returns (steps taken,
    that probability); `log(step, exact, copy)` sees every check."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    probe = [oracle_transcript(s) for s in SPLITS["train"].seeds(64, WARMUP_OFFSET)]
    pool = [_encode(tokenizer, c) for c in warmup_corpus(pool_size, 64, oracle_share)]
    model.train()
    exact = 0.0
    step = 0
    while step < max_steps:
        logp, _ = _reply_logprobs(model, *_batch(tokenizer, rng.sample(pool, batch_size)))
        loss = -logp.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % check_every == 0:
            exact, copy = reply_scores(model, tokenizer, probe)
            if log is not None:
                log(step, exact, copy)
            if exact >= target:
                break
    model.eval()
    return step, exact


def build_llama(
    vocab_size: int, hidden_size: int, num_layers: int, seed: int, tokenizer: Any
) -> Any:
    """A tiny Llama, randomly initialised except that every attention layer's value and
    output projections start as the identity: each head starts by copying (a slice of) the
    embeddings it attends to, a copying prior (pretrained models have copy heads), so the
    warm-up only has to learn where to look. From random projections, 2 layers learn no
    copying in 700 warm-up steps; with them they copy within a few hundred.
    (Llama, not Qwen2 as in `agents.tiny`: transformers' AutoTokenizer loads a Qwen2
    directory's tokenizer as Qwen2's byte-level class, which would replace this word-level
    pre-tokenizer; a Llama directory keeps tokenizer.json as saved.)"""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=4,  # values as wide as the model: the identity fits
        attention_bias=True,  # query/key biases: attention by relative position alone
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.v_proj.weight.copy_(torch.eye(hidden_size))
            layer.self_attn.o_proj.weight.copy_(torch.eye(hidden_size))
    return model


def terminal_tiny_dir(
    *,
    hidden_size: int = 128,
    num_layers: int = 2,
    oracle_share: float = ORACLE_SHARE,
    max_steps: int = 1500,
    target: float = 0.2,
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
            warm_up(
                model,
                tokenizer,
                max_steps=max_steps,
                target=target,
                oracle_share=oracle_share,
                seed=seed,
            )
        finally:
            torch.set_num_threads(threads)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    name = (
        f"terminal-tiny-v{TERMINAL_TINY_VERSION}-h{hidden_size}-l{num_layers}-o{oracle_share}"
        f"-m{max_steps}-t{target}-s{seed}"
    )
    return build_once(cache_dir() / name, build)
