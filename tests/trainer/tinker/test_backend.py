"""`Sampler`, the Tinker server's adapter over the engine (`agents.engine.sync`): Tinker's
sampling semantics hold through it (untempered logprobs, prompt logprobs with nothing sampled,
stop strings at the end of the text), and a request the engine fails inside a batch is rerun
alone with the tokens it gets alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from skyrl_sdk.trainer.tinker.backend import BaseModels, SampleCall, Sampler  # noqa: E402
from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models  # noqa: E402
from skyrl_sdk.trainer.tinker.wire import SamplingParamsIn  # noqa: E402


@pytest.fixture(scope="module")
def sampler() -> Sampler:
    specs = default_models()
    return Sampler(*BaseModels(specs).load(TINY_NAME), specs[0])


def _logp(sampler: Sampler, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = sampler.model(input_ids=torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, -1)


def test_sampled_logprobs_are_the_untempered_distributions(sampler: Sampler) -> None:
    prompt = [5, 6, 7]
    params = SamplingParamsIn(max_tokens=4, stop=[], seed=0, temperature=0.5)
    (seq,) = sampler.sample(prompt, 1, params, prompt_logprobs=False)["sequences"]
    logp = _logp(sampler, prompt + seq["tokens"])
    expected = [float(logp[len(prompt) - 1 + k, t]) for k, t in enumerate(seq["tokens"])]
    assert seq["logprobs"] == pytest.approx(expected, abs=1e-4)


def test_max_tokens_zero_scores_the_prompt_and_samples_nothing(sampler: Sampler) -> None:
    prompt = [5, 6, 7, 8]
    params = SamplingParamsIn(max_tokens=0, stop=[], seed=0)
    out = sampler.sample(prompt, 2, params, prompt_logprobs=True)
    assert [s["tokens"] for s in out["sequences"]] == [[], []]
    logp = _logp(sampler, prompt)
    expected = [float(logp[i, prompt[i + 1]]) for i in range(len(prompt) - 1)]
    assert out["prompt_logprobs"][0] is None
    assert out["prompt_logprobs"][1:] == pytest.approx(expected, abs=1e-5)


def test_a_stop_string_ends_the_sample_where_its_text_ends_with_it(sampler: Sampler) -> None:
    greedy = SamplingParamsIn(max_tokens=8, stop=[], temperature=0.0)
    (free,) = sampler.sample([5, 6, 7], 1, greedy, prompt_logprobs=False)["sequences"]
    text = sampler.tokenizer.decode(free["tokens"][:3])
    params = SamplingParamsIn(max_tokens=8, stop=[text[-2:]], temperature=0.0)
    (seq,) = sampler.sample([5, 6, 7], 1, params, prompt_logprobs=False)["sequences"]
    assert seq["stop_reason"] == "stop" and len(seq["tokens"]) <= 3
    assert seq["tokens"] == free["tokens"][: len(seq["tokens"])]
    assert sampler.tokenizer.decode(seq["tokens"]).endswith(text[-2:])


def test_a_request_failed_inside_a_batch_is_rerun_alone(sampler: Sampler) -> None:
    calls = [
        SampleCall([5, 6, 7], 1, SamplingParamsIn(max_tokens=4, stop=[], seed=s)) for s in range(3)
    ]
    batched = sampler.sample_many(calls)
    forward, failed = sampler.model.forward, []

    def flaky(*args, **kwargs):  # the first batched decoding step fails
        if kwargs["input_ids"].shape[0] > 1 and not failed:
            failed.append(1)
            raise RuntimeError("a failing step")
        return forward(*args, **kwargs)

    batches = sampler.batches
    sampler.model.forward = flaky
    try:
        again = sampler.sample_many(calls)
    finally:
        del sampler.model.forward
    assert failed and sampler.batches == batches + 1 + len(calls)  # the batch, then each alone
    for a, b in zip(batched, again, strict=True):
        assert [s["tokens"] for s in a["sequences"]] == [s["tokens"] for s in b["sequences"]]
        assert a["sequences"][0]["logprobs"] == pytest.approx(
            b["sequences"][0]["logprobs"], abs=1e-5
        )
