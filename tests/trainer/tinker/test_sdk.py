"""The official `tinker` SDK from PyPI, unmodified, against our server."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.trainer.tinker.conftest import API_KEY, AUTH, TinkerServer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402


def _client(server: TinkerServer) -> tinker.ServiceClient:
    return tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)


def _datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def _sft_batch(tokenizer) -> list[types.Datum]:
    texts = ["the cat sat on the mat", "two plus two is four", "hello world again"]
    return [_datum(tokenizer.encode(t)) for t in texts]


def test_sft_loss_falls(tinker_server: TinkerServer) -> None:
    service = _client(tinker_server)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=8).result()
    tokenizer = trainer.get_tokenizer()
    batch = _sft_batch(tokenizer)
    losses = []
    for _ in range(12):
        fb = trainer.forward_backward(batch, "cross_entropy")
        opt = trainer.optim_step(types.AdamParams(learning_rate=2e-2))
        out = fb.result()
        opt.result()
        losses.append(out.metrics["loss:sum"])
        assert len(out.loss_fn_outputs) == len(batch)
        lp = out.loss_fn_outputs[0]["logprobs"].to_numpy()
        assert lp.shape == (len(batch[0].loss_fn_inputs["target_tokens"].data),)
    assert min(losses[-3:]) < min(losses[:3]), losses
    assert losses[-1] < 0.9 * losses[0], losses


def test_sample_returns_logprobs(tinker_server: TinkerServer) -> None:
    service = _client(tinker_server)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=4).result()
    sampler = trainer.save_weights_and_get_sampling_client()
    if hasattr(sampler, "result"):
        sampler = sampler.result()
    prompt = types.ModelInput.from_ints(trainer.get_tokenizer().encode("hello"))
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=0)
    res = sampler.sample(prompt, num_samples=3, sampling_params=params).result()
    assert len(res.sequences) == 3
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= 6
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
        assert all(lp <= 0 for lp in seq.logprobs)
        assert seq.stop_reason in ("stop", "length")
    logprobs = sampler.compute_logprobs(prompt).result()
    assert logprobs[0] is None and len(logprobs) == len(prompt.to_ints())


def test_bad_requests_get_json_4xx(tinker_server: TinkerServer) -> None:
    url = tinker_server.base_url
    r = httpx.post(f"{url}/api/v1/get_info", json={"model_id": "nope"}, headers=AUTH)
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    r = httpx.post(f"{url}/api/v1/optim_step", json={"model_id": 3}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"]
    service = _client(tinker_server)
    with pytest.raises(tinker.BadRequestError):
        service.create_lora_training_client("no/such-model", rank=4).result()


def test_unknown_loss_fails_the_future(tinker_server: TinkerServer) -> None:
    trainer = (
        _client(tinker_server)
        .create_lora_training_client(tinker_server.base_model, rank=4)
        .result()
    )
    batch = _sft_batch(trainer.get_tokenizer())
    with pytest.raises(tinker.RequestFailedError):
        trainer.forward_backward(batch, "importance_sampling").result()  # no advantages


def test_importance_sampling_and_state_restore(tinker_server: TinkerServer) -> None:
    service = _client(tinker_server)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=4).result()
    tokenizer = trainer.get_tokenizer()
    sampler = trainer.save_weights_and_get_sampling_client()
    if hasattr(sampler, "result"):
        sampler = sampler.result()
    prompt_ids = tokenizer.encode("the cat")
    res = sampler.sample(
        types.ModelInput.from_ints(prompt_ids), 4, types.SamplingParams(max_tokens=5, seed=1)
    ).result()
    data = []
    for i, seq in enumerate(res.sequences):
        full = prompt_ids + list(seq.tokens)
        n = len(full) - 1
        sampled_lp = [0.0] * (len(prompt_ids) - 1) + list(seq.logprobs)
        adv = [0.0] * (len(prompt_ids) - 1) + [1.0 if i % 2 else -1.0] * len(seq.tokens)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={
                    "target_tokens": full[1:],
                    "logprobs": sampled_lp,
                    "advantages": adv,
                },
            )
        )
        assert len(sampled_lp) == n
    out = trainer.forward_backward(data, "importance_sampling").result()
    # Fresh weights: the learner's logprobs equal the sampler's on sampled tokens.
    for d, o in zip(data, out.loss_fn_outputs, strict=True):
        lp = o["logprobs"].to_numpy()
        old = np.asarray(d.loss_fn_inputs["logprobs"].data)
        k = len(prompt_ids) - 1
        np.testing.assert_allclose(lp[k:], old[k:], atol=1e-4)
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = trainer.save_state("ckpt-1").result().path
    assert path.startswith("tinker://")
    probe = _sft_batch(tokenizer)
    before = trainer.forward(probe, "cross_entropy").result()
    restored = _client(tinker_server).create_training_client_from_state_with_optimizer(path)
    if hasattr(restored, "result"):
        restored = restored.result()
    after = restored.forward(probe, "cross_entropy").result()
    assert after.metrics["loss:sum"] == pytest.approx(before.metrics["loss:sum"], rel=1e-6)
    # Both continue identically: same optimizer state, same update.
    a = trainer.forward_backward(probe, "cross_entropy")
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    b = restored.forward_backward(probe, "cross_entropy")
    restored.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert a.result().metrics["loss:sum"] == pytest.approx(b.result().metrics["loss:sum"], rel=1e-6)
    x = trainer.forward(probe, "cross_entropy").result().metrics["loss:sum"]
    y = restored.forward(probe, "cross_entropy").result().metrics["loss:sum"]
    assert x == pytest.approx(y, rel=1e-5)


def test_cancelled_samples_stop(tinker_server: TinkerServer) -> None:
    """Cancelling a sample future (the SDK then calls cancel_future) stops the running request
    at its next token and drops the queued one."""
    import time

    from skyrl_sdk.trainer.tinker.store import FutureState

    svc = tinker_server.service
    sampler = _client(tinker_server).create_sampling_client(base_model=tinker_server.base_model)
    sampler = sampler.result()
    prompt = types.ModelInput.from_ints([5, 6, 7])
    long = types.SamplingParams(max_tokens=1500, stop=[], seed=0)
    futures = [sampler.sample(prompt, 1, long) for _ in range(2)]
    deadline = time.monotonic() + 30
    while len(ids := svc.store.ids("sample", FutureState.PENDING)) < 2:
        assert time.monotonic() < deadline, "the samples never reached the server"
        time.sleep(0.01)
    time.sleep(0.5)  # let the client read the submit replies and start polling
    t0 = time.monotonic()
    for f in futures:
        f.future().cancel()
    while any(svc.store.get(i).state is FutureState.PENDING for i in ids):
        assert time.monotonic() < deadline, "cancel_future never arrived"
        time.sleep(0.01)
    assert {svc.store.get(i).state for i in ids} == {FutureState.CANCELLED}
    # The worker is free again at once (1500 tokens would take far longer).
    short = types.SamplingParams(max_tokens=2, stop=[], seed=0)
    assert len(sampler.sample(prompt, 1, short).result().sequences[0].tokens) == 2
    assert time.monotonic() - t0 < 10
    url = f"{tinker_server.base_url}/api/v1/cancel_future"
    r = httpx.post(url, json={"request_id": "nope"}, headers=AUTH)
    assert r.status_code == 404
