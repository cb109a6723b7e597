"""`SyncEngine`: the engine stepped by its caller's thread. Requests submitted between steps
join the running batch; seeded tokens do not depend on the batch; the request options
(`RequestOptions`) give untempered logprobs, prompt logprobs and end-of-text stop strings."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from skyrl_sdk.agents.engine.options import LogprobMode, RequestOptions  # noqa: E402
from skyrl_sdk.agents.engine.request import Request  # noqa: E402
from skyrl_sdk.agents.engine.sync import SyncEngine  # noqa: E402
from skyrl_sdk.agents.policy import Completion, FinishReason, SamplingParams  # noqa: E402


@pytest.fixture(scope="module")
def parts(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture
def engine(parts) -> SyncEngine:
    model, tokenizer = parts
    return SyncEngine(model, tokenizer, max_batch_size=8)


def _collect(engine: SyncEngine, jobs, options=RequestOptions(), between=None):
    """Submit (prompt, sampling) jobs, run, and return each one's completion or error."""
    out: dict[int, Completion | BaseException] = {}
    requests: list[Request] = []
    for i, (prompt, sampling) in enumerate(jobs):
        requests.append(
            engine.submit(
                prompt, sampling, lambda r, v, i=i: out.__setitem__(i, v), options=options
            )
        )
    engine.run(between)
    return [out[i] for i in range(len(jobs))], requests


def test_seeded_tokens_do_not_depend_on_the_batch_or_on_joining_it(engine) -> None:
    a = ([5, 6, 7], SamplingParams(max_tokens=12, seed=1))
    b = ([8, 9, 10, 11, 12], SamplingParams(max_tokens=4, seed=2))
    (alone_a,), _ = _collect(engine, [a])
    (alone_b,), _ = _collect(engine, [b])
    together, _ = _collect(engine, [a, b])
    assert together[0].token_ids == alone_a.token_ids
    assert together[1].token_ids == alone_b.token_ids
    # b submitted between two steps of a running batch joins it at the next step.
    joined: dict[str, Completion | BaseException] = {}
    calls = []

    def between() -> None:
        calls.append(engine.stats().steps)
        if len(calls) == 3:
            engine.submit(*b, lambda r, v: joined.__setitem__("b", v))

    (late_a,), _ = _collect(engine, [a], between=between)
    assert late_a.token_ids == alone_a.token_ids
    assert joined["b"].token_ids == alone_b.token_ids  # type: ignore[union-attr]
    assert len(calls) >= 12  # `between` ran before every step


def test_raw_logprobs_are_those_of_the_untempered_distribution(engine, parts) -> None:
    model, _ = parts
    prompt = [5, 6, 7, 8]
    sampling = SamplingParams(max_tokens=3, temperature=0.7, seed=3)
    (raw,), _ = _collect(engine, [(prompt, sampling)], RequestOptions(logprobs=LogprobMode.RAW))
    (tempered,), _ = _collect(engine, [(prompt, sampling)])
    assert raw.token_ids == tempered.token_ids
    ids = torch.tensor([prompt + list(raw.token_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    n = len(prompt)
    expected = [float(logp[n - 1 + k, t]) for k, t in enumerate(raw.token_ids)]
    assert raw.logprobs == pytest.approx(expected, abs=1e-4)
    assert tempered.logprobs != pytest.approx(expected, abs=1e-3)


def test_prompt_logprobs_score_every_prompt_token(engine, parts) -> None:
    model, _ = parts
    prompt = [5, 6, 7, 8, 9]
    sampling = SamplingParams(max_tokens=2, seed=0)
    options = RequestOptions(prompt_logprobs=True)
    (_done,), (request,) = _collect(engine, [(prompt, sampling)], options)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0].float(), -1)
    expected = [float(logp[i, prompt[i + 1]]) for i in range(len(prompt) - 1)]
    assert request.prompt_logprobs is not None and request.prompt_logprobs[0] is None
    assert request.prompt_logprobs[1:] == pytest.approx(expected, abs=1e-5)
    assert engine.score(prompt)[1:] == pytest.approx(expected, abs=1e-5)
    # A second request on the same prompt is scored again (not taken from the prefix cache).
    (_again,), (second,) = _collect(engine, [(prompt, sampling)], options)
    assert second.prompt_logprobs == pytest.approx(request.prompt_logprobs)


def test_stop_suffixes_match_the_end_of_the_decoded_sample(engine, parts) -> None:
    _, tokenizer = parts
    greedy = SamplingParams(max_tokens=8, temperature=0.0)
    (free,), _ = _collect(engine, [([5, 6, 7], greedy)])
    text = tokenizer.decode(list(free.token_ids[:3]))
    options = RequestOptions(stop_suffixes=(text[-2:],))
    (stopped,), _ = _collect(engine, [([5, 6, 7], greedy)], options)
    assert stopped.finish_reason is FinishReason.STOP
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]
    assert tokenizer.decode(list(stopped.token_ids)).endswith(text[-2:])
    assert len(stopped.token_ids) <= 3


def test_a_cancelled_request_leaves_and_the_others_finish(engine) -> None:
    jobs = [([5, 6, 7], SamplingParams(max_tokens=30, seed=s)) for s in range(2)]
    out: dict[int, Completion | BaseException] = {}
    rows = [
        engine.submit(p, s, lambda r, v, i=i: out.__setitem__(i, v))
        for i, (p, s) in enumerate(jobs)
    ]
    steps = []

    def between() -> None:
        steps.append(1)
        if len(steps) == 3:
            rows[0].cancelled = True

    engine.run(between)
    assert 0 not in out and rows[0].finish is FinishReason.ABORT
    assert isinstance(out[1], Completion) and len(out[1].token_ids) == 30
    assert engine.stats().cancelled == 1
