"""The `echo-word` tiny model's parts: its closed tokenizer and its train-split-only warm-up data."""

from __future__ import annotations

import shutil

import pytest

from skyrl_gym.envs.terminal_gen.generate import SPLITS


def test_tokenizer_round_trips_every_oracle_and_wrong_reply_without_unknown_tokens():
    pytest.importorskip("tokenizers")
    from .terminal_tiny import (
        oracle_transcript,
        terminal_tokenizer,
        wrong_replies,
    )

    tokenizer = terminal_tokenizer()
    for seed in (*SPLITS["train"].seeds(20), *SPLITS["heldout"].seeds(20)):
        chat = oracle_transcript(seed)
        for reply in (chat[2]["content"], *wrong_replies(seed)):
            text = tokenizer.apply_chat_template(
                [*chat[:2], {"role": "assistant", "content": reply}], tokenize=False
            )
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert tokenizer.unk_token_id not in ids, text
            assert tokenizer.decode(ids) == text
    word = tokenizer.encode("pebble87", add_special_tokens=False)
    assert len(word) == 2  # one token for the word, one for the number


def test_warmup_corpus_is_train_split_tasks_with_a_mixed_demonstrator():
    from .terminal_tiny import (
        oracle_transcript,
        warmup_corpus,
        wrong_replies,
    )

    corpus = warmup_corpus(400, oracle_share=0.3)
    oracle = 0
    for _, user, reply in corpus:
        words = user["content"].split()
        word, name = words[3], words[-1].rstrip(".")
        right = f"<bash>echo {word} > {name}</bash><answer>done</answer>"
        oracle += reply["content"] == right
    assert 0.22 <= oracle / len(corpus) <= 0.38  # about 30% oracle replies
    # Every other reply is one of its task's wrong replies, which never solve it.
    seeds = SPLITS["train"].seeds(400, 100_000)
    for seed, (_, _, reply) in zip(seeds, corpus, strict=True):
        assert reply["content"] in {oracle_transcript(seed)[2]["content"], *wrong_replies(seed)}
    assert warmup_corpus(50, oracle_share=1.0) == [
        oracle_transcript(s) for s in SPLITS["train"].seeds(50, 100_000)
    ]
    # No held-out task appears in the warm-up (the generator keeps the splits disjoint).
    heldout = {oracle_transcript(s)[1]["content"] for s in SPLITS["heldout"].seeds(200)}
    assert not heldout & {chat[1]["content"] for chat in warmup_corpus(2000, oracle_share=0.3)}


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
def test_wrong_replies_fail_the_verifier_and_the_oracle_passes():
    import skyrl_gym

    from .terminal_tiny import oracle_transcript, wrong_replies

    seed = SPLITS["train"].seeds(1)[0]
    env = skyrl_gym.make(
        "terminal-gen", split="train", families=["echo-word"], per_family=1, brief=True
    )
    try:
        oracle = oracle_transcript(seed)[2]["content"]
        rewards = {}
        for reply in (oracle, *wrong_replies(seed)):
            env.reset()
            _, rewards[reply], terminated, _, _ = env.step(reply)
            assert terminated
        assert rewards == {reply: float(reply == oracle) for reply in rewards}
    finally:
        env.close()
