"""The `echo-word` tiny model's parts: its closed tokenizer and its train-split-only warm-up data."""

from __future__ import annotations

import pytest

from skyrl_gym.envs.terminal_gen.generate import SPLITS


def test_tokenizer_round_trips_every_oracle_reply_without_unknown_tokens():
    pytest.importorskip("tokenizers")
    from skyrl_sdk.trainer.terminal_tiny import oracle_transcript, terminal_tokenizer

    tokenizer = terminal_tokenizer()
    for seed in (*SPLITS["train"].seeds(20), *SPLITS["heldout"].seeds(20)):
        chat = oracle_transcript(seed)
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.unk_token_id not in ids, text
        assert tokenizer.decode(ids) == text
    word = tokenizer.encode("pebble87", add_special_tokens=False)
    assert len(word) == 2  # one token for the word, one for the number


def test_warmup_corpus_is_train_split_oracle_transcripts_only():
    from skyrl_sdk.trainer.terminal_tiny import oracle_transcript, warmup_corpus

    corpus = warmup_corpus(50)
    assert len(corpus) == 50
    for _, user, reply in corpus:
        words = user["content"].split()
        word, name = words[3], words[-1].rstrip(".")
        assert reply["content"] == f"<bash>echo {word} > {name}</bash><answer>done</answer>"
    # No held-out task appears in the warm-up (the generator keeps the splits disjoint).
    heldout = {oracle_transcript(s)[1]["content"] for s in SPLITS["heldout"].seeds(200)}
    assert not heldout & {chat[1]["content"] for chat in warmup_corpus(2000)}
