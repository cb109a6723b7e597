"""Tiny models for tests, demos and benchmarks, built locally: no download, ever.

`build_tokenizer` trains a byte-level BPE on a small generated corpus (well under a second)
and wraps it as a `PreTrainedTokenizerFast` with a chat template; `build_model` makes a
randomly initialised causal LM from a config. `tiny_model_dir` saves both once and returns
the directory, which loads like any pretrained model directory.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from skyrl_gym.cache import build_once, cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML (Qwen style), the tiny model's template."""

TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages and messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
    "{{ '\n\n' }}{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for t in tools %}{{ '\n' }}{{ t | tojson }}{% endfor %}"
    "{{ '\n' }}</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' and tools and loop.first %}"
    "{% elif m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user"
    "{% endif %}"
    "{{ '\n' }}<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>{{ '\n' }}"
    "{% endif %}"
    "{% elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}"
    "{% if m['content'] or not loop.first %}{{ '\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ c[\'function\'][\'name\'] }}", "arguments": '
    "{% if c['function']['arguments'] is string %}{{ c['function']['arguments'] }}"
    "{% else %}{{ c['function']['arguments'] | tojson }}{% endif %}}\n</tool_call>"
    "{% endfor %}<|im_end|>{{ '\n' }}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>{{ '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML with tools the Qwen2.5 / Hermes way: the tool signatures in the system turn, calls
as `<tool_call>` JSON in assistant turns, tool results as `<tool_response>` blocks in a user
turn. `skyrl serve` renders requests for the tiny tokenizer with it."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TINY_VERSION = "1"  # bump when the corpus or sizes change, so cached dirs are rebuilt


def default_corpus(lines: int = 3000, seed: int = 0) -> list[str]:
    """Text resembling what envs and templates produce: prompts, tool tags, numbers."""
    rng = random.Random(seed)
    # One string read as a word list: easier to scan than 170 quoted items.
    vocabulary = (
        "the a of to and in is it you that he was for on are with as his they be at one "
        "have this from or had by word but what some we can out other were all there "
        "when up use your how said an each she which do their time if will way about "
        "many then them write would like so these her long make thing see him two has "
        "look more day could go come number sound no most people my over know water than "
        "call first who may down side been now find any new work part take get place "
        "made live where after back little only round man year came show every good me "
        "give our under name very through just form sentence great think say help low "
        "line differ turn cause much mean before move right boy old answer calculator "
        "observation tool call result error question solve apples trees books farmer "
        "library train students pencils boxes shelves each total left share equally"
    )
    words = vocabulary.split()
    tags = ["calculator", "answer", "observation", "tool_call", "sql", "python"]
    roles = ["system", "user", "assistant", "tool"]
    out = []
    for _ in range(lines):
        kind = rng.random()
        if kind < 0.4:
            out.append(
                " ".join(rng.choice(words) for _ in range(rng.randint(4, 16))).capitalize() + "."
            )
        elif kind < 0.7:
            a, b, c = rng.randint(0, 999), rng.randint(0, 99), rng.randint(1, 9)
            tag = rng.choice(tags)
            out.append(f"<{tag}>{a} {rng.choice('+-*/')} {b} * {c}</{tag}>")
        elif kind < 0.85:
            out.append(
                f'{{"name": "{rng.choice(tags)}", "arguments": {{"x": "{rng.randint(0, 9999)}"}}}}'
            )
        else:
            out.append(f"{rng.choice(roles)}\n{rng.choice(words)} {rng.randint(0, 100)}\n")
    return out


def train_bpe(
    corpus: Iterable[str] | None = None,
    *,
    vocab_size: int = 1000,
    special_tokens: Iterable[str] = SPECIAL_TOKENS,
):
    """Train a byte-level BPE (a `tokenizers.Tokenizer`) on `corpus` (default: generated)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(dict.fromkeys(special_tokens)),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(corpus if corpus is not None else default_corpus()), trainer)
    return core


def wrap_tokenizer(
    core,
    *,
    chat_template: str = CHATML_TEMPLATE,
    eos_token: str = "<|im_end|>",
    bos_token: str | None = None,
    pad_token: str = "<|endoftext|>",
    special_tokens: Iterable[str] = (),
) -> PreTrainedTokenizerFast:
    """A `PreTrainedTokenizerFast` over a copy of `core`, with a chat template."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    named = {eos_token, pad_token, bos_token}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(core.to_str()),
        eos_token=eos_token,
        pad_token=pad_token,
        bos_token=bos_token,
        additional_special_tokens=[s for s in special_tokens if s not in named],
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def build_tokenizer(
    corpus: Iterable[str] | None = None, *, vocab_size: int = 1000
) -> PreTrainedTokenizerFast:
    """The tiny model's tokenizer: a local byte-level BPE with the ChatML template."""
    core = train_bpe(corpus, vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS)
    return wrap_tokenizer(core, special_tokens=SPECIAL_TOKENS)


def tiny_renderer(path: str | Path | None = None):
    """A `ChatRenderer` for the tiny byte-level BPE tokenizer with `TOOLS_TEMPLATE`."""
    from transformers import AutoTokenizer

    from skyrl_sdk.agents.chat import ChatRenderer

    directory = Path(path) if path is not None else tiny_model_dir()
    return ChatRenderer(AutoTokenizer.from_pretrained(directory), TOOLS_TEMPLATE)


def build_model(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
) -> PreTrainedModel:
    """A randomly initialised Qwen2-architecture causal LM from a config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.eval()
    return model


def tiny_model_dir(path: str | Path | None = None, *, hidden_size: int = 64, seed: int = 0) -> Path:
    """Build (once) and save a tiny model + tokenizer; return the directory.

    Default location: `$SKYRL_CACHE/tiny-v<N>-h<hidden>-s<seed>` (`~/.cache/skyrl`).
    """
    if path is None:
        path = cache_dir() / f"tiny-v{TINY_VERSION}-h{hidden_size}-s{seed}"

    def build(staging: Path) -> None:
        tokenizer = build_tokenizer()
        model = build_model(
            len(tokenizer),
            hidden_size=hidden_size,
            seed=seed,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging)

    return build_once(Path(path), build)
