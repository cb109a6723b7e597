"""Vector 9 of issue 14: skyrl's own HTTP servers as an attack surface.

`skyrl serve`, `skyrl tinker serve` and `skyrl search serve` run here as real processes on
127.0.0.1, started the way a user starts them, with the key in `$SKYRL_API_KEY` (and, for
`skyrl serve`, the body limit in `$SKYRL_MAX_REQUEST_BYTES`). Each attack goes through plain
HTTP or the official SDKs, so the tests run unchanged against the code before the defence: there
a request without a key is served, a 100 MB body is read and parsed, and `save_state("..")`
replaces the run's whole checkpoint folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SKYRL = [sys.executable, "-m", "skyrl_gym.cli"]
SERVE_KEY = "sk-security-serve"
TINKER_KEY = "tml-security-tinker"  # the tinker SDK only sends keys with this prefix
SEARCH_KEY = "security-search"
MiB = 1024 * 1024
ATTACK_BYTES = 100 * MiB
"""The body of the size attacks (sent from a generator: the test never holds it)."""
SERVE_LIMIT = 1 * MiB
"""`skyrl serve`'s body limit here: a chunked body is held up to the limit before the 413, so a
small limit shows the bound; the other servers keep the 32 MiB default."""
PEAK_GROWTH_BOUND = 10 * MiB
"""How much a server's peak RSS may grow while refusing a 100 MB body ("a few MB")."""


@dataclass(frozen=True)
class Server:
    """A server process on 127.0.0.1."""

    proc: subprocess.Popen[bytes]
    """The server (`python -m skyrl_gym.cli ...`), its own process group."""
    url: str
    """`http://127.0.0.1:PORT`."""
    state_dir: Path | None = None
    """The Tinker server's state dir."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYRL_")}
    env.update(
        TINKER_TELEMETRY="0",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        **extra,
    )
    return env


def _start(args: list[str], health: str, env: dict[str, str], port: int) -> Server:
    """Start `skyrl ARGS` and wait until `health` answers 200 without a key (it stays open)."""
    # A file, not a pipe: a chatty server never blocks on it. It lives as long as the server.
    log = tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(
        [*SKYRL, *args], env=env, stdout=log, stderr=log, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            err = log.read().decode(errors="replace")
            pytest.fail(f"skyrl {' '.join(args)} exited {proc.returncode}: {err[-2000:]}")
        try:
            if httpx.get(url + health, timeout=2).status_code == 200:
                return Server(proc, url)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    _stop(proc)
    pytest.fail(f"skyrl {' '.join(args)} did not come up")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def serve() -> Iterator[Server]:
    port = _free_port()
    env = _env(SKYRL_API_KEY=SERVE_KEY, SKYRL_MAX_REQUEST_BYTES=str(SERVE_LIMIT))
    server = _start(["serve", "--model", "tiny", "--port", str(port)], "/health", env, port)
    yield server
    _stop(server.proc)


@pytest.fixture(scope="module")
def tinker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("tinker")
    port = _free_port()
    state = tmp_path_factory.mktemp("tinker-state")
    args = ["tinker", "serve", "--port", str(port), "--state-dir", str(state)]
    args += ["--torch-threads", "1"]
    server = _start(args, "/api/v1/healthz", _env(SKYRL_API_KEY=TINKER_KEY), port)
    yield Server(server.proc, server.url, state)
    _stop(server.proc)


@pytest.fixture(scope="module")
def search() -> Iterator[Server]:
    port = _free_port()
    args = ["search", "serve", "bundled", "--port", str(port)]
    server = _start(args, "/health", _env(SKYRL_API_KEY=SEARCH_KEY), port)
    yield server
    _stop(server.proc)


# -- no key, wrong key ----------------------------------------------------------------------------


def test_serve_refuses_requests_without_the_key(serve: Server) -> None:
    """Vector 9: `skyrl serve` answered anyone; now 401 (OpenAI's error shape) without the key."""
    body = {"model": "tiny", "prompt": "1 + 1 =", "max_tokens": 2}
    url = f"{serve.url}/v1/completions"
    missing = httpx.post(url, json=body, timeout=60)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "missing_api_key"
    wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer sk-wrong"}, timeout=60)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{serve.url}/v1/models", timeout=10).status_code == 401
    ok = httpx.post(url, json=body, headers={"Authorization": f"Bearer {SERVE_KEY}"}, timeout=60)
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"]


def test_tinker_server_refuses_requests_without_the_key(tinker_server: Server) -> None:
    """Vector 9: the Tinker server created sessions for anyone; now 401 without its key."""
    import tinker

    url = f"{tinker_server.url}/api/v1/create_session"
    body = {"tags": [], "user_metadata": {}, "sdk_version": "0"}
    assert httpx.post(url, json=body, timeout=30).status_code == 401
    wrong = httpx.post(url, json=body, headers={"X-API-Key": "tml-wrong"}, timeout=30)
    assert wrong.status_code == 401 and "invalid API key" in wrong.json()["detail"]
    with pytest.raises(tinker.AuthenticationError):  # the SDK's first request already fails
        tinker.RestClient(base_url=tinker_server.url, api_key="tml-wrong").get_server_capabilities()
    # The SDK with the right key is served (it sends X-API-Key); so is a Bearer token.
    good = tinker.RestClient(base_url=tinker_server.url, api_key=TINKER_KEY)
    assert "skyrl/tiny" in [
        m.model_name for m in good.get_server_capabilities().result().supported_models
    ]
    bearer = {"Authorization": f"Bearer {TINKER_KEY}"}
    assert httpx.post(url, json=body, headers=bearer, timeout=30).status_code == 200


def test_search_server_refuses_requests_without_the_key(search: Server) -> None:
    """Vector 9: `skyrl search serve` answered anyone; now 401 without its key."""
    url = f"{search.url}/retrieve"
    body = {"queries": ["hash table"], "topk": 1}
    assert httpx.post(url, json=body, timeout=30).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert httpx.post(url, json=body, headers=wrong, timeout=30).status_code == 401
    from skyrl_sdk.tools.search import HttpRetriever

    with HttpRetriever(search.url, api_key=SEARCH_KEY) as client:
        assert len(client.retrieve(["hash table"], 1)[0]) == 1


# -- 100 MB bodies --------------------------------------------------------------------------------


def _status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _junk(total: int = ATTACK_BYTES, chunk: int = MiB) -> Iterator[bytes]:
    """`total` bytes that are not JSON, made as they are sent. (Not JSON so that a server which
    reads it all stops at the parser: a 100 MB prompt would take `skyrl serve` to 17 GB.)"""
    block = b"x" * chunk
    for _ in range(total // chunk):
        yield block


def _attack(server: Server, path: str, headers: dict[str, str], *, chunked: bool) -> None:
    """Send 100 MB to `path`; assert 413 and that the server's peak RSS barely moved."""
    pid = server.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    before = _status_bytes(pid, "VmRSS")
    sent = {**headers, "content-type": "application/json"}
    if not chunked:  # declared up front: the guard can answer before reading a byte
        sent["content-length"] = str(ATTACK_BYTES)
    r = httpx.post(server.url + path, content=_junk(), headers=sent, timeout=120)
    assert r.status_code == 413, (r.status_code, r.text[:200])
    growth = _status_bytes(pid, "VmHWM") - before
    assert growth < PEAK_GROWTH_BOUND, f"peak RSS grew {growth / MiB:.1f} MiB"
    assert server.proc.poll() is None


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_serve_refuses_a_100mb_body_unread(serve: Server, chunked: bool) -> None:
    """Vector 9: a 100 MB prompt took `skyrl serve` to 17 GB; now 413, RSS bounded."""
    auth = {"Authorization": f"Bearer {SERVE_KEY}"}
    _attack(serve, "/v1/completions", auth, chunked=chunked)


def test_serve_refuses_an_overlong_prompt_without_tokenizing_it(serve: Server) -> None:
    """Vector 9: within the body limit, a long prompt was still tokenized whole before its
    length was checked (48 MB took 7.7 GB); now it is counted in pieces and refused early."""
    prompt = "hello world " * 80_000  # under the 1 MiB limit; ~160k tokens, the context is 2k
    pid = serve.proc.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    before = _status_bytes(pid, "VmRSS")
    r = httpx.post(
        f"{serve.url}/v1/completions",
        json={"model": "tiny", "prompt": prompt, "max_tokens": 1},
        headers={"Authorization": f"Bearer {SERVE_KEY}"},
        timeout=120,
    )
    growth = _status_bytes(pid, "VmHWM") - before
    assert r.status_code == 400, r.text[:200]
    assert growth < PEAK_GROWTH_BOUND, f"peak RSS grew {growth / MiB:.1f} MiB"


def test_tinker_server_refuses_a_100mb_body_unread(tinker_server: Server) -> None:
    """Vector 9: a 300 MB `user_metadata` was accepted; now 413 at the default 32 MiB limit."""
    _attack(tinker_server, "/api/v1/create_session", {"X-API-Key": TINKER_KEY}, chunked=False)


def test_search_server_refuses_a_100mb_body_unread(search: Server) -> None:
    """Vector 9: `skyrl search serve` read any body; now 413 at the default 32 MiB limit."""
    auth = {"Authorization": f"Bearer {SEARCH_KEY}"}
    _attack(search, "/retrieve", auth, chunked=False)


# -- checkpoint names -----------------------------------------------------------------------------


def _checkpoint_files(state: Path) -> set[Path]:
    return {p.relative_to(state) for p in (state / "checkpoints").rglob("*") if p.is_file()}


def test_tinker_checkpoint_names_cannot_leave_their_folder(tinker_server: Server) -> None:
    """Vector 9: `save_state("..")` replaced the run's whole checkpoint folder (deleting its
    other checkpoints); `.`, `..` and separators now get 400 and nothing is touched."""
    import tinker

    service = tinker.ServiceClient(base_url=tinker_server.url, api_key=TINKER_KEY)
    trainer = service.create_lora_training_client("skyrl/tiny", rank=4, seed=0).result()
    keep = trainer.save_state("keep").result().path
    sampler = trainer.save_weights_for_sampler("keep").result().path
    state = tinker_server.state_dir
    assert state is not None
    files = _checkpoint_files(state)
    assert files
    outcomes: dict[str, str] = {}
    for save in (trainer.save_state, trainer.save_weights_for_sampler):
        for bad in ("..", ".", "a/b", "a\\b", "a\x00b", "x" * 129):
            try:
                save(bad).result()
                outcomes[f"{save.__name__}({bad!r})"] = "saved"
            except tinker.BadRequestError as e:  # HTTP 400
                outcomes[f"{save.__name__}({bad!r})"] = f"400 {e}"
            except tinker.TinkerError as e:  # accepted, then failed on the server
                outcomes[f"{save.__name__}({bad!r})"] = f"failed {e}"
    assert _checkpoint_files(state) == files, f"checkpoints touched: {outcomes}"
    assert all(o.startswith("400") and "checkpoint name" in o for o in outcomes.values()), outcomes
    rest = tinker.RestClient(base_url=tinker_server.url, api_key=TINKER_KEY)
    listed = rest.list_checkpoints(trainer.model_id).result().checkpoints
    assert {c.tinker_path for c in listed} == {keep, sampler}
    # The refused saves used up their seq_ids: the model goes on, and "keep" still loads.
    assert trainer.save_state("after").result().path.endswith("/weights/after")
    restored = service.create_training_client_from_state(keep).result()
    assert restored.model_id != trainer.model_id


# -- binding --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "health"),
    [
        (["serve", "--model", "tiny"], "/health"),
        (["tinker", "serve", "--torch-threads", "1"], "/api/v1/healthz"),
        (["search", "serve", "bundled"], "/health"),
    ],
    ids=["serve", "tinker", "search"],
)
def test_non_loopback_bind_without_a_key_is_refused(
    args: list[str], health: str, tmp_path: Path
) -> None:
    """Vector 9: each server bound 0.0.0.0 with no authentication; now it refuses to start."""
    port = _free_port()
    extra = ["--state-dir", str(tmp_path)] if args[0] == "tinker" else []
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [*SKYRL, *args, *extra, "--host", "0.0.0.0", "--port", str(port)],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 180
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    answered = httpx.get(f"http://127.0.0.1:{port}{health}", timeout=2).status_code
                except httpx.HTTPError:
                    answered = None
                assert answered is None, f"skyrl {args[0]} serves 0.0.0.0 without a key"
                time.sleep(0.2)
            assert proc.poll() is not None, "the server neither refused nor came up"
            log.seek(0)
            err = log.read().decode(errors="replace")
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert proc.returncode == 2 and len(errors) == 1, err[-2000:]
            assert "0.0.0.0" in errors[0] and "--api-key" in errors[0]
        finally:
            _stop(proc)


def test_non_loopback_bind_with_a_key_starts() -> None:
    """With a key, binding all interfaces is allowed (and the key is enforced there)."""
    port = _free_port()
    env = _env(SKYRL_API_KEY=SEARCH_KEY)
    server = _start(
        ["search", "serve", "bundled", "--host", "0.0.0.0", "--port", str(port)],
        "/health",
        env,
        port,
    )
    try:
        r = httpx.post(f"{server.url}/retrieve", json={"queries": ["x"]}, timeout=30)
        assert r.status_code == 401
    finally:
        _stop(server.proc)
