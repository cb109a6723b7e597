"""`LocalEngine(num_threads=N)`: the decoding worker runs with N torch threads, the rest of the
process keeps its own; `tiny` policies decode on one (a second thread only loses time on a
busy machine: see `LocalEngine.num_threads`)."""

from __future__ import annotations

import asyncio

import torch

from skyrl_sdk.agents.policy import SamplingParams
from skyrl_sdk.agents.policy_spec import load_policy


def test_tiny_decodes_on_one_thread_and_the_caller_keeps_its_own() -> None:
    before = torch.get_num_threads()
    engine = load_policy("tiny").policy
    seen: list[int] = []
    engine.model.register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))

    async def one() -> int:
        try:
            c = await engine.generate([1, 2, 3], SamplingParams(max_tokens=4, seed=0))
            return len(c.token_ids)
        finally:
            await engine.aclose()

    assert asyncio.run(one()) >= 1
    assert engine.num_threads == 1 and seen and set(seen) == {1}
    assert torch.get_num_threads() == before
