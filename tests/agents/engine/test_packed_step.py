"""Mixed steps: a request joining a running batch is prefilled inside its next decoding step,
and every request gets what it gets without them (same tokens, logprobs to float rounding)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("torch")

from skyrl_sdk.agents.engine import LocalEngine
from skyrl_sdk.agents.policy import Completion, SamplingParams
from skyrl_sdk.agents.tiny import tiny_model_dir


def _prompt(engine: LocalEngine, text: str) -> list[int]:
    return list(engine.renderer.prompt([{"role": "user", "content": text}]).token_ids)


async def _while_one_decodes(
    mixed: bool, requests: list[tuple[str, int]], *, batch: int = 4
) -> tuple[list[Completion], Any, Completion]:
    """A long request decodes; `requests` (prompt text, max_tokens) arrive one after the other
    while it runs; then a follow-up turn of the first and a repeat of it arrive too."""
    engine = LocalEngine.from_pretrained(tiny_model_dir(), max_batch_size=batch, mixed_steps=mixed)
    try:
        long = asyncio.create_task(
            engine.generate(
                _prompt(engine, "tell me a story"), SamplingParams(max_tokens=60, seed=1)
            )
        )
        while engine.stats().generated_tokens < 2:
            await asyncio.sleep(0.001)
        done = []
        for i, (text, max_tokens) in enumerate(requests):
            sampling = SamplingParams(max_tokens=max_tokens, seed=10 + i)
            done.append(await engine.generate(_prompt(engine, text), sampling))
        first = _prompt(engine, requests[0][0])
        follow_up = [*first, *done[0].token_ids, *_prompt(engine, "and then?")]
        done.append(await engine.generate(follow_up, SamplingParams(max_tokens=6, seed=20)))
        done.append(await engine.generate(first, SamplingParams(max_tokens=4, seed=21)))
        assert not long.done()  # everything above joined a running batch
        return done, engine.stats(), await long
    finally:
        await engine.aclose()


def _assert_same(a: list[Completion], b: list[Completion]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert x.finish_reason == y.finish_reason
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs, strict=True)) < 1e-5


def test_newcomers_are_prefilled_inside_decoding_steps_with_the_same_results() -> None:
    requests = [
        ("what is two plus two", 8),
        ("word " * 80, 5),  # longer than the batch so far: the slots widen for it
        ("stop at once", 1),  # done with its first token, sampled in the mixed step
    ]
    mixed, mixed_stats, mixed_long = asyncio.run(_while_one_decodes(True, requests))
    plain, plain_stats, plain_long = asyncio.run(_while_one_decodes(False, requests))
    _assert_same([*mixed, mixed_long], [*plain, plain_long])
    # Every prefill but the long request's own (it started the batch) rode in a decoding step.
    assert mixed_stats.mixed_steps == mixed_stats.prefills - 1 == len(requests) + 2
    assert plain_stats.mixed_steps == 0
    assert mixed_stats.prefills == plain_stats.prefills
    assert mixed_stats.prompt_tokens_computed == plain_stats.prompt_tokens_computed
    assert mixed_stats.prompt_tokens_reused == plain_stats.prompt_tokens_reused > 0
    assert len(mixed[2].token_ids) == 1


def test_a_full_batch_takes_newcomers_into_freed_slots() -> None:
    """With every slot taken, a newcomer waits, then joins through a mixed step when one frees."""

    async def run(mixed: bool) -> tuple[list[Completion], Any]:
        engine = LocalEngine.from_pretrained(tiny_model_dir(), max_batch_size=2, mixed_steps=mixed)
        try:
            calls = [
                engine.generate(
                    _prompt(engine, f"request {i}"), SamplingParams(max_tokens=n, seed=i)
                )
                for i, n in enumerate((30, 5, 7, 9))
            ]
            return list(await asyncio.gather(*calls)), engine.stats()
        finally:
            await engine.aclose()

    mixed, stats = asyncio.run(run(True))
    plain, _ = asyncio.run(run(False))
    _assert_same(mixed, plain)
    assert stats.mixed_steps >= 1


def test_mixed_steps_need_sdpa_attention() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_dir()
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    engine = LocalEngine(model, AutoTokenizer.from_pretrained(path))
    try:
        assert not engine.mixed_steps
    finally:
        asyncio.run(engine.aclose())
    static = LocalEngine.from_pretrained(path, scheduling="static")
    try:
        assert not static.mixed_steps
    finally:
        asyncio.run(static.aclose())
