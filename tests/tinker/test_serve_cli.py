"""`skyrl tinker serve` as a real process; futures survive a restart as recorded outcomes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.tinker.conftest import _free_port
from trainer.tinker.store import FutureState, FutureStore

tinker = pytest.importorskip("tinker")


def _start(port: int, state: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "skyrl_gym.cli", "tinker", "serve", "--port", str(port)]
    env = {**os.environ, "TINKER_TELEMETRY": "0"}
    return subprocess.Popen([*cmd, "--state-dir", str(state)], env=env, start_new_session=True)


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


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_serve_cli_and_restart(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(port, tmp_path)
    try:
        _wait_up(url, proc)
        rest = tinker.RestClient(base_url=url, api_key="tml-local-test")
        caps = rest.get_server_capabilities().result()
        assert "skyrl/tiny" in [m.model_name for m in caps.supported_models]
        service = tinker.ServiceClient(base_url=url, api_key="tml-local-test")
        trainer = service.create_lora_training_client("skyrl/tiny", rank=4).result()
        assert trainer.get_info().model_data.model_name == "skyrl/tiny"
    finally:
        _stop(proc)
    # A request still pending when the server died is reported as lost after a restart.
    store = FutureStore(tmp_path / "futures.sqlite")
    pending = store.create("forward_backward", "sess-x:train:0")
    store.close()
    proc = _start(port, tmp_path)
    try:
        _wait_up(url, proc)
        r = httpx.post(f"{url}/api/v1/retrieve_future", json={"request_id": pending})
        assert r.status_code == 200 and "restarted" in r.json()["error"]
        r = httpx.post(f"{url}/api/v1/retrieve_future", json={"request_id": "req-unknown"})
        assert r.status_code == 404 and r.json()["detail"]
    finally:
        _stop(proc)
    assert FutureStore(tmp_path / "futures.sqlite").get(pending).state is FutureState.LOST
