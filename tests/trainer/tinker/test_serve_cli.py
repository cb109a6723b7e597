"""`skyrl tinker serve` as a real process, restarted on the same state dir.

What a client keeps across a restart: its saved checkpoints (loadable by path), its training
client (the model id resumes exactly from the clean-shutdown autosave), its path samplers;
what it loses, with a clear error: in-memory sampler snapshots, a model changed after its last
saved state when the server was killed, and requests that were pending.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from skyrl_sdk.trainer.tinker.store import DB_NAME, FutureState, FutureStore
from tests.trainer.tinker.conftest import _free_port

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

API_KEY = "tml-local-test"
MODEL = "skyrl/tiny"


def _start(port: int, state: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "skyrl_gym.cli", "tinker", "serve", "--port", str(port)]
    cmd += ["--state-dir", str(state), "--torch-threads", "1", "--api-key", API_KEY]
    env = {**os.environ, "TINKER_TELEMETRY": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, env=env, start_new_session=True)


def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            if httpx.get(f"{url}/api/v1/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("the server did not come up")


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        proc.wait(30)


def _probe(tokenizer) -> list[types.Datum]:
    out = []
    for text in ("the cat sat on the mat", "two plus two is four"):
        ids = tokenizer.encode(text)
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
            )
        )
    return out


def _step(trainer, batch) -> float:
    fb = trainer.forward_backward(batch, "cross_entropy")
    trainer.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    return fb.result().metrics["loss:sum"]


def _loss(trainer, batch) -> float:
    return trainer.forward(batch, "cross_entropy").result().metrics["loss:sum"]


def test_state_survives_restarts(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(port, tmp_path)
    try:
        _wait_up(url, proc)
        caps = tinker.RestClient(base_url=url, api_key=API_KEY).get_server_capabilities()
        assert MODEL in [m.model_name for m in caps.result().supported_models]
        service = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        trainer = service.create_lora_training_client(MODEL, rank=4, seed=0).result()
        model_id = trainer.model_id
        batch = _probe(trainer.get_tokenizer())
        _step(trainer, batch)
        state_path = trainer.save_state("s1").result().path
        loss_at_s1 = _loss(trainer, batch)
        sampler_path = trainer.save_weights_for_sampler("w1").result().path
        _step(trainer, batch)  # changed after its last save_state: only the autosave has it
        loss_before = _loss(trainer, batch)
        snapshot = trainer.save_weights_and_get_sampling_client().result()
        path_sampler = service.create_sampling_client(model_path=sampler_path).result()
        prompt = types.ModelInput.from_ints(batch[0].model_input.to_ints()[:3])
        params = types.SamplingParams(max_tokens=4, stop=[], seed=7)
        tokens_before = path_sampler.sample(prompt, 2, params).result().sequences
    finally:
        _stop(proc)  # SIGTERM: a clean shutdown, with autosave
    # A request still pending when the server went down is reported as lost.
    store = FutureStore(tmp_path / DB_NAME)
    pending = store.create("forward_backward", "sess-x:train:0")
    store.close()

    proc = _start(port, tmp_path)
    try:
        _wait_up(url, proc)
        # The same training client continues where it was (weights and optimizer state).
        assert _loss(trainer, batch) == pytest.approx(loss_before, rel=1e-6)
        _step(trainer, batch)
        # Its path sampler is rebuilt; its in-memory snapshot is gone, with a clear error.
        again = path_sampler.sample(prompt, 2, params).result().sequences
        assert [s.tokens for s in again] == [s.tokens for s in tokens_before]
        with pytest.raises(tinker.APIStatusError) as gone:
            snapshot.sample(prompt, 1, params).result()
        assert gone.value.status_code == 410 and "snapshot" in str(gone.value)
        # Checkpoints load by path from a new client.
        service2 = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        restored = service2.create_training_client_from_state_with_optimizer(state_path).result()
        assert _loss(restored, batch) == pytest.approx(loss_at_s1, rel=1e-6)
        fresh = service2.create_sampling_client(model_path=sampler_path).result()
        assert len(fresh.sample(prompt, 1, params).result().sequences[0].tokens) == 4
        rest = tinker.RestClient(base_url=url, api_key=API_KEY)
        run = rest.get_training_run(model_id).result()
        assert run.base_model == MODEL and run.lora_rank == 4 and not run.corrupted
        listed = rest.list_checkpoints(model_id).result().checkpoints
        assert {c.tinker_path for c in listed} == {state_path, sampler_path}
        auth = {"X-API-Key": API_KEY}
        r = httpx.post(f"{url}/api/v1/retrieve_future", json={"request_id": pending}, headers=auth)
        assert r.status_code == 200 and "restarted" in r.json()["error"]
        unknown = {"request_id": "req-unknown"}
        r = httpx.post(f"{url}/api/v1/retrieve_future", json=unknown, headers=auth)
        assert r.status_code == 404 and r.json()["detail"]
    finally:
        _stop(proc, signal.SIGKILL)  # a crash: the step above is in no saved state
    assert FutureStore(tmp_path / DB_NAME).get(pending).state is FutureState.LOST

    proc = _start(port, tmp_path)
    try:
        _wait_up(url, proc)
        with pytest.raises(tinker.APIStatusError) as gone:
            _loss(trainer, batch)
        assert gone.value.status_code == 410
        assert state_path in str(gone.value) and "create_training_client_from_state" in str(
            gone.value
        )
        rest = tinker.RestClient(base_url=url, api_key=API_KEY)
        assert rest.get_training_run(model_id).result().corrupted
        # The checkpoint named in the error is where the run continues from.
        again = tinker.ServiceClient(base_url=url, api_key=API_KEY)
        resumed = again.create_training_client_from_state_with_optimizer(state_path).result()
        assert _loss(resumed, batch) == pytest.approx(loss_at_s1, rel=1e-6)
    finally:
        _stop(proc)
