"""What makes the server fast, tested as behaviour (the timings live in `skyrl bench tinker`):
concurrent clients' samples share one forward pass, a large forward_backward runs in
micro-batches with the gradients of one pass, EOS ends a sample unless `stop=[]`, and the
per-call fixes (GIL hand-over, no fsync per commit) are in place while the server runs."""

from __future__ import annotations

import copy
import sys
import threading
import time

import numpy as np
import pytest
import torch

from tests.trainer.tinker.conftest import API_KEY, TinkerServer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from skyrl_sdk.trainer.tinker import lora  # noqa: E402
from skyrl_sdk.trainer.tinker.backend import BaseModels, Sampler, TrainedModel  # noqa: E402
from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models  # noqa: E402
from skyrl_sdk.trainer.tinker.store import FutureState  # noqa: E402
from skyrl_sdk.trainer.tinker.wire import Datum, SamplingParamsIn  # noqa: E402


def _samplers(server: TinkerServer, n: int) -> list:
    out = []
    for _ in range(n):
        service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
        client = service.create_sampling_client(base_model=server.base_model)
        out.append(client.result() if hasattr(client, "result") else client)
    return out


def test_concurrent_clients_on_one_base_model_share_one_forward_pass(
    tinker_server: TinkerServer,
) -> None:
    svc = tinker_server.service
    clients = _samplers(tinker_server, 4)
    base = svc.base_samplers[tinker_server.base_model]
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12], [13], [14, 15, 16, 17]]  # padded together
    params = [types.SamplingParams(max_tokens=5 + i, stop=[], seed=i) for i in range(4)]
    alone = [
        c.sample(types.ModelInput.from_ints(p), 2, sp).result()
        for c, p, sp in zip(clients, prompts, params, strict=True)
    ]
    # Other tests share the server: their pending samples may end (or be cancelled) meanwhile,
    # so count the futures that are new, not the total.
    pending_before = set(svc.store.ids("sample", FutureState.PENDING))
    gate, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        gate.wait()

    # Hold the worker so that all four arrive together. Wait until the hold runs: a batch
    # still decoding another test's request (the server is shared) would take them in.
    svc.worker.submit(hold)
    assert holding.wait(60), "the worker never became free"
    try:
        futures = [
            c.sample(types.ModelInput.from_ints(p), 2, sp)
            for c, p, sp in zip(clients, prompts, params, strict=True)
        ]
        deadline = time.monotonic() + 60
        while len(set(svc.store.ids("sample", FutureState.PENDING)) - pending_before) < 4:
            assert time.monotonic() < deadline, "the samples never reached the server"
            time.sleep(0.01)
        batches_before = base.batches
    finally:
        gate.set()
    together = [f.result() for f in futures]
    assert base.batches - batches_before == 1  # one prefill pass for the four clients
    for a, b, sp in zip(alone, together, params, strict=True):
        for x, y in zip(a.sequences, b.sequences, strict=True):
            assert x.tokens == y.tokens and len(x.tokens) == sp.max_tokens
            np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)


def _model(budget: int) -> TrainedModel:
    specs = default_models()
    settings = lora.from_request({"rank": 4, "seed": 0})
    return TrainedModel("m", specs[0], BaseModels(specs), lora=settings, micro_batch_tokens=budget)


def test_large_forward_backward_runs_in_micro_batches_with_the_same_gradients() -> None:
    rng = np.random.default_rng(0)
    data = []
    for n in (3, 40, 17, 64, 9, 33, 50, 5):
        tokens = rng.integers(5, 900, n + 1)
        inputs = {"target_tokens": tokens[1:], "weights": rng.random(n).astype(np.float32)}
        data.append(Datum(tokens[:-1].tolist(), inputs))
    whole, parts = _model(10**9), _model(100)
    a = whole.forward_backward(data, "cross_entropy", {}, forward_only=False)
    b = parts.forward_backward(data, "cross_entropy", {}, forward_only=False)
    assert whole.passes == 1 and parts.passes >= 4  # no pass over 100 padded tokens but one
    assert b["metrics"]["loss:sum"] == pytest.approx(a["metrics"]["loss:sum"], rel=1e-5)
    for x, y in zip(a["loss_fn_outputs"], b["loss_fn_outputs"], strict=True):  # datum order
        np.testing.assert_allclose(x["logprobs"], y["logprobs"], atol=1e-5)
    grads = {n: p.grad for n, p in whole.model.named_parameters() if p.requires_grad}
    for name, p in parts.model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(p.grad, grads[name], rtol=1e-4, atol=1e-6)


def test_eos_ends_a_sample_unless_stop_is_empty() -> None:
    specs = default_models()
    model, tokenizer = BaseModels(specs).load(TINY_NAME)
    greedy = SamplingParamsIn(max_tokens=6, stop=[], temperature=0.0)
    first = Sampler(model, tokenizer, specs[0]).sample([5, 6, 7], 1, greedy, prompt_logprobs=False)
    eos_id = first["sequences"][0]["tokens"][0]
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_id)  # greedy emits EOS first
    assert tokenizer.eos_token_id == eos_id
    sampler = Sampler(model, tokenizer, specs[0])
    for stop, length in ((["never-seen"], 1), ("never-seen", 1), (None, 1), ([], 6), ([99], 1)):
        params = SamplingParamsIn(max_tokens=6, stop=stop, temperature=0.0)
        (seq,) = sampler.sample([5, 6, 7], 1, params, prompt_logprobs=False)["sequences"]
        assert len(seq["tokens"]) == length, f"stop={stop!r}"
        assert seq["stop_reason"] == ("stop" if length == 1 else "length")


def test_per_call_fixes_are_on_while_the_server_runs(tinker_server: TinkerServer) -> None:
    svc = tinker_server.service
    # The event loop gets the GIL back from the torch worker within 0.5 ms, not Python's 5 ms.
    assert sys.getswitchinterval() == pytest.approx(svc.config.gil_switch_interval_s)
    # Futures and runs are written without an fsync per commit (synchronous=NORMAL is 1).
    assert svc.store._db.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert svc.registry._db.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_a_bad_request_in_a_batch_fails_alone() -> None:
    from skyrl_sdk.trainer.tinker.backend import SampleCall

    specs = default_models()
    sampler = Sampler(*BaseModels(specs).load(TINY_NAME), specs[0])
    params = SamplingParamsIn(max_tokens=3, stop=[], seed=0)
    calls = [
        SampleCall([5, 6, 7], 2, params),
        SampleCall([5, 10**6], 1, params),  # not a token id of this model
        SampleCall([], 1, params),
        SampleCall([5] * (specs[0].max_context_length + 1), 1, params),
    ]
    good, vocab, empty, long = sampler.sample_many(calls)
    assert [len(s["tokens"]) for s in good["sequences"]] == [3, 3]
    assert isinstance(vocab, ValueError) and "token ids" in str(vocab)
    assert isinstance(empty, ValueError) and "empty" in str(empty)
    assert isinstance(long, ValueError) and "context length" in str(long)


def test_prompt_logprobs_of_a_padded_batch_match_each_request_alone() -> None:
    from skyrl_sdk.trainer.tinker.backend import SampleCall

    specs = default_models()
    sampler = Sampler(*BaseModels(specs).load(TINY_NAME), specs[0])
    params = SamplingParamsIn(max_tokens=2, stop=[], seed=1)
    calls = [
        SampleCall([5, 6, 7, 8, 9, 10], 1, params, True),
        SampleCall([11, 12], 3, params, True),
    ]
    together = sampler.sample_many(calls)
    for call, batched in zip(calls, together, strict=True):
        (alone,) = sampler.sample_many([call])
        assert batched["prompt_logprobs"][0] is None and len(batched["prompt_logprobs"]) == len(
            call.prompt
        )
        np.testing.assert_allclose(
            batched["prompt_logprobs"][1:], alone["prompt_logprobs"][1:], atol=1e-5
        )
        assert [s["tokens"] for s in batched["sequences"]] == [
            s["tokens"] for s in alone["sequences"]
        ]


def test_a_request_joins_a_running_batch_and_leaves_when_it_ends() -> None:
    from skyrl_sdk.trainer.tinker.backend import SampleCall

    specs = default_models()
    sampler = Sampler(*BaseModels(specs).load(TINY_NAME), specs[0])
    long = SampleCall([5, 6, 7], 1, SamplingParamsIn(max_tokens=30, stop=[], seed=0))
    short = SampleCall([8, 9, 10, 11, 12], 2, SamplingParamsIn(max_tokens=3, stop=[], seed=1))
    bad = SampleCall([10**6], 1, SamplingParamsIn(max_tokens=3))
    steps = []

    def join(room: int) -> list[tuple[int, SampleCall]]:
        steps.append(room)
        return [(1, short), (2, bad)] if len(steps) == 4 else []

    order: list[int] = []
    outcomes: dict[int, object] = {}

    def done(index: int, outcome: object) -> None:
        order.append(index)
        outcomes[index] = outcome

    sampler.decode([(0, long)], done, join=join)
    assert order == [2, 1, 0] and sampler.joins == 1  # the bad one at once, short before long
    assert isinstance(outcomes[2], ValueError)
    for index, call in ((0, long), (1, short)):
        (alone,) = sampler.sample_many([call])
        assert [s["tokens"] for s in outcomes[index]["sequences"]] == [  # type: ignore[index]
            s["tokens"] for s in alone["sequences"]
        ]


def test_a_sample_arriving_during_a_long_one_is_answered_first(
    tinker_server: TinkerServer,
) -> None:
    (client,) = _samplers(tinker_server, 1)
    base = tinker_server.service.base_samplers[tinker_server.base_model]
    joins = base.joins
    prompt = types.ModelInput.from_ints([5, 6, 7])
    running = tinker_server.service.running
    long = client.sample(prompt, 1, types.SamplingParams(max_tokens=1500, stop=[], seed=0))
    deadline = time.monotonic() + 30
    while not running:
        assert time.monotonic() < deadline, "the long sample never started"
        time.sleep(0.005)
    short = client.sample(prompt, 1, types.SamplingParams(max_tokens=2, stop=[], seed=0))
    assert len(short.result().sequences[0].tokens) == 2
    assert not long.future().done()  # answered while the long one still decodes
    assert base.joins == joins + 1
    assert len(long.result().sequences[0].tokens) == 1500
