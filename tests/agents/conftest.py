"""Shared fixtures: locally trained tokenizers for each chat-template style, tiny models."""

from __future__ import annotations

import pytest

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.tiny import default_corpus, train_bpe, wrap_tokenizer
from tests.agents.templates import STYLES, TemplateStyle


@pytest.fixture(scope="session")
def bpe_core():
    """One byte-level BPE knowing every style's special tokens (trained once, ~1 s)."""
    specials = [tok for style in STYLES for tok in style.special_tokens]
    return train_bpe(default_corpus(1500), vocab_size=800, special_tokens=specials)


def make_renderer(core, style: TemplateStyle) -> ChatRenderer:
    tokenizer = wrap_tokenizer(
        core,
        chat_template=style.template,
        eos_token=style.eos_token,
        bos_token=style.bos_token,
        pad_token=style.pad_token,
        special_tokens=style.special_tokens,
    )
    return ChatRenderer(tokenizer)


@pytest.fixture(scope="session", params=[s.name for s in STYLES])
def styled_renderer(request, bpe_core) -> ChatRenderer:
    """A renderer per template style (the test runs once for each)."""
    style = next(s for s in STYLES if s.name == request.param)
    return make_renderer(bpe_core, style)


@pytest.fixture(scope="session")
def chatml_renderer(bpe_core) -> ChatRenderer:
    return make_renderer(bpe_core, STYLES[0])


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny Qwen2-architecture model + tokenizer saved as a pretrained directory."""
    from skyrl_sdk.agents.tiny import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")
