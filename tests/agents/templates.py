"""Chat templates in the styles of real model families, written for these tests.

Each is paired with a byte-level BPE trained locally on the fly (see `conftest.py`), so the
conformance tests exercise real template logic without downloading any tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

# ChatML as Qwen2.5 renders it: consecutive tool results share one user turn. (Newlines right
# after a block tag are written as expressions: transformers renders with trim_blocks.)
QWEN = (
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Llama 3: BOS, header tokens, content trimmed, tool results from the `ipython` role.
LLAMA3 = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% set role = 'ipython' if m['role'] == 'tool' else m['role'] %}"
    "<|start_header_id|>{{ role }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# Mistral: no generation prompt (the reply follows [/INST]), EOS closes each reply, the
# system prompt folded into the first user turn, tool results in their own tags.
MISTRAL = (
    "{% set ns = namespace(system='') %}"
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{% set ns.system = m['content'] ~ '\n\n' %}"
    "{% elif m['role'] == 'user' %}[INST] {{ ns.system }}{{ m['content'] }} [/INST]"
    "{% set ns.system = '' %}"
    "{% elif m['role'] == 'tool' %}[TOOL_RESULTS] {{ m['content'] }} [/TOOL_RESULTS]"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] }}{{ eos_token }}"
    "{% else %}{{ raise_exception('unknown role ' ~ m['role']) }}{% endif %}"
    "{% endfor %}"
)

# Gemma: the assistant is `model`, no system role (folded into the first user turn), tool
# results shown as user turns, <end_of_turn> ends a reply while EOS is a different token.
GEMMA = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{% set ns.system = m['content'] ~ '\n\n' %}"
    "{% else %}{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{% if role == 'user' %}{{ ns.system }}{% set ns.system = '' %}"
    "{% endif %}{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@dataclass(frozen=True)
class TemplateStyle:
    """A chat template plus the special tokens its tokenizer needs."""

    name: str
    template: str
    special_tokens: tuple[str, ...]
    eos_token: str
    bos_token: str | None
    pad_token: str


STYLES = (
    TemplateStyle(
        "qwen",
        QWEN,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        "<|im_end|>",
        None,
        "<|endoftext|>",
    ),
    TemplateStyle(
        "llama3",
        LLAMA3,
        (
            "<|begin_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|finetune_right_pad_id|>",
        ),
        "<|eot_id|>",
        "<|begin_of_text|>",
        "<|finetune_right_pad_id|>",
    ),
    TemplateStyle(
        "mistral",
        MISTRAL,
        ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
        "</s>",
        "<s>",
        "<unk>",
    ),
    TemplateStyle(
        "gemma",
        GEMMA,
        ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"),
        "<eos>",
        "<bos>",
        "<pad>",
    ),
)
