"""Vectors 5, 6 and the server half of 8 of issue 23: one client hurting the others on a shared
server.

`skyrl serve` (the tiny local model, continuous batching) and the Tinker server run here on
127.0.0.1 in this process (so a test can read the engine's batch), and every attack goes through
the real `openai` SDK, raw HTTP (httpx) or a raw socket, as a command agent with only its own
session key, or a Tinker client, would send it.

- A session sending n=16, max_tokens=2000 requests in a loop took the whole batch: another
  session's 16-token request waited for it (0.47 s to 71 s in the report).
- 256 samples x 2000 tokens sent to the Tinker server and then abandoned kept running.
- 3.5M `stop_token_ids` in one serve request slowed its batch 6.5x; the Tinker server took 200k
  stop strings.
- Neither server cut a client that sends its request head a byte at a time, forever.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from skyrl_sdk.agents.serving import ServeConfig, start_server

MAIN_KEY = "sk-shared-main"
TINKER_KEY = "tml-shared-tinker"
TINKER_AUTH = {"X-API-Key": TINKER_KEY}
HOG = "hog"
VICTIM = "victim"
PROMPT = "the quick brown fox"
BATCH = 16
"""The engine's batch (the default of `skyrl serve`)."""


@pytest.fixture(scope="module")
def tiny() -> Any:
    """The tiny local model as `skyrl serve --policy tiny` loads it."""
    from skyrl_sdk.agents.policy_spec import PolicyUse, load_policy

    return load_policy("tiny", max_batch_size=BATCH, use=PolicyUse.SERVE)


def _serve(tiny: Any, **config: Any) -> Any:
    return start_server(
        tiny.policy, ServeConfig(api_key=MAIN_KEY, **config), renderer=tiny.renderer
    )


def _session(
    server: Any, session: str, timeout: float = 120, budget: int | None = None
) -> openai.OpenAI:
    key = server.issue_session_key(session, budget)
    return openai.OpenAI(
        base_url=server.session_url(session), api_key=key, max_retries=0, timeout=timeout
    )


def _wait(until: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if until():
            return True
        time.sleep(0.01)
    return until()


# -- skyrl serve: one session and the shared batch ---------------------------------------------


def test_one_session_cannot_take_the_batch_from_another(tiny: Any) -> None:
    """Vector 5: the hog's n=16 x 2000-token loop holds at most its share of the batch, and the
    other session's 16-token request runs beside it (answered while the hog's first request is
    still decoding), instead of waiting for the hog's batch to end."""
    engine = tiny.policy
    with _serve(tiny) as server:
        hog, victim = _session(server, HOG), _session(server, VICTIM)
        stop, finished, errors = threading.Event(), [], []

        def loop() -> None:
            while not stop.is_set():
                try:
                    hog.completions.create(model="tiny", prompt=PROMPT, n=16, max_tokens=2000)
                    finished.append(time.monotonic())
                except openai.APIError as e:  # the server stopping under it
                    errors.append(e)
                    return

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        peak = 0

        def decoding() -> bool:
            nonlocal peak
            peak = max(peak, engine.running)
            return False

        assert _wait(lambda: engine.running > 0, 60), "the hog's request never started"
        _wait(decoding, 1.5)  # the hog alone: how much of the batch does it take?
        before = len(finished)
        answer = victim.completions.create(model="tiny", prompt=PROMPT, max_tokens=16)
        during = len(finished) - before
        stop.set()
    thread.join(30)
    assert len(answer.choices[0].text) > 0 or answer.usage.completion_tokens == 16
    assert peak <= BATCH // 2, f"one session held {peak} of the {BATCH} rows"
    assert during == 0, "the other session waited for the hog's batch to end"


def test_a_session_cannot_queue_without_bound(tiny: Any) -> None:
    """Vector 5: many concurrent n=16 requests from one session: past its queue cap they get
    429 (OpenAI's rate-limit error, so the SDK raises `RateLimitError`) instead of queueing."""
    with _serve(tiny) as server:
        hog = _session(server, HOG, timeout=4, budget=0)  # the queue cap alone, no budget
        outcomes: list[BaseException | None] = []

        def one() -> None:
            try:
                hog.completions.create(model="tiny", prompt=PROMPT, n=16, max_tokens=2000)
                outcomes.append(None)
            except BaseException as e:
                outcomes.append(e)

        threads = [threading.Thread(target=one, daemon=True) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    refused = [e for e in outcomes if isinstance(e, openai.RateLimitError)]
    assert refused, f"no request was refused: {outcomes}"
    assert {e.body["code"] for e in refused} == {"session_queue_full"}


def test_a_session_key_carries_a_token_budget(tiny: Any) -> None:
    """Vector 5: past its token budget (prompt + generated tokens) a session key gets 429 with
    an OpenAI error body; another session is not affected."""
    with _serve(tiny, session_token_budget=4000) as server:
        hog, victim = _session(server, HOG), _session(server, VICTIM)
        hog.completions.create(model="tiny", prompt=PROMPT, n=16, max_tokens=200)
        with pytest.raises(openai.RateLimitError) as refused:
            hog.completions.create(model="tiny", prompt=PROMPT, n=16, max_tokens=200)
        assert refused.value.body["code"] == "session_token_budget_exceeded"
        assert victim.completions.create(model="tiny", prompt=PROMPT, max_tokens=16).choices


def test_serve_refuses_millions_of_stop_token_ids(tiny: Any) -> None:
    """Vector 8: 3.5M `stop_token_ids` in one request: 400 naming the field (it ran, slowing
    every row of its batch)."""
    ids = b",".join([b"5"] * 3_500_000)
    body = b'{"model": "tiny", "prompt": "x", "max_tokens": 2, "stop_token_ids": [' + ids + b"]}"
    with _serve(tiny) as server:
        reply = httpx.post(
            f"{server.base_url}/completions",
            content=body,
            headers={"Authorization": f"Bearer {MAIN_KEY}", "Content-Type": "application/json"},
            timeout=120,
        )
    assert reply.status_code == 400, reply.text[:300]
    assert reply.json()["error"]["param"] == "stop_token_ids"


def _slow_head(host: str, port: int, seconds: float) -> float | None:
    """Send a request head a byte at a time; seconds until the server closed (None: never)."""
    started = time.monotonic()
    with socket.create_connection((host, port), timeout=1) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        while time.monotonic() - started < seconds:
            try:
                s.sendall(b"X")
                s.settimeout(0.3)
                if s.recv(1024) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                continue
            except OSError:
                return time.monotonic() - started
    return None


def test_serve_cuts_a_client_that_never_finishes_its_headers(tiny: Any) -> None:
    """Vector 8: a request head sent a byte at a time is cut after the header-read timeout."""
    with _serve(tiny, header_timeout_s=1.0) as server:
        closed = _slow_head(server.host, server.port, 8)
    assert closed is not None and closed < 5, closed


# -- the Tinker server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tinker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Tinker server whose abandon and header timeouts are ~1 s (60 s and 10 s by default)."""
    pytest.importorskip("tinker")
    from skyrl_sdk.trainer.tinker.cli import default_models
    from skyrl_sdk.trainer.tinker.server import ServerConfig, ServerThread

    config = ServerConfig(
        models=default_models(), state_dir=tmp_path_factory.mktemp("tinker"), api_key=TINKER_KEY
    )
    config.abandon_after_s = 1.0  # type: ignore[attr-defined]
    config.header_timeout_s = 1.0  # type: ignore[attr-defined]
    with ServerThread(config) as server:
        yield server


def _sample_body(num_samples: int, max_tokens: int, stop: Any = ()) -> dict[str, Any]:
    from skyrl_sdk.trainer.tinker.cli import TINY_NAME

    return {
        "base_model": TINY_NAME,
        "num_samples": num_samples,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
        "sampling_params": {"max_tokens": max_tokens, "stop": list(stop), "seed": 0},
    }


def _cancel_all(c: httpx.Client, replies: list[httpx.Response]) -> None:
    """Cancel whatever an attack got accepted (the code before the fix runs it all)."""
    for r in replies:
        if r.status_code == 200 and "request_id" in r.json():
            c.post("/api/v1/cancel_future", json={"request_id": r.json()["request_id"]})


def test_tinker_cancels_a_sample_nobody_polls(tinker: Any) -> None:
    """Vector 6: 32 samples x 2000 tokens submitted and never polled: cancelled once nobody has
    polled for `abandon_after_s` (1 s here), and the worker stops decoding it."""
    from skyrl_sdk.trainer.tinker.store import FutureState

    svc = tinker.app.state.service
    with httpx.Client(base_url=tinker.base_url, headers=TINKER_AUTH, timeout=60) as c:
        reply = c.post("/api/v1/asample", json=_sample_body(32, 2000, stop=[]))
        assert reply.status_code == 200, reply.text
        request_id = reply.json()["request_id"]
        try:
            cancelled = _wait(
                lambda: (
                    svc.store.get(request_id).state is FutureState.CANCELLED
                    and request_id not in svc.running
                ),
                15,
            )
        finally:
            _cancel_all(c, [reply])
    assert cancelled, svc.store.get(request_id)
    assert "polled" in json.dumps(svc.store.get(request_id).result)


def test_tinker_refuses_num_samples_times_max_tokens_over_the_cap(tinker: Any) -> None:
    """Vector 6: 256 samples x 2000 tokens (512,000 > 65,536): 400 before anything runs."""
    with httpx.Client(base_url=tinker.base_url, headers=TINKER_AUTH, timeout=60) as c:
        reply = c.post("/api/v1/asample", json=_sample_body(256, 2000, stop=[]))
        _cancel_all(c, [reply])
    assert reply.status_code == 400, reply.text
    assert "65536" in reply.text.replace(",", "")


def test_tinker_bounds_queued_sampling_work(tinker: Any) -> None:
    """Vector 6: requests under the per-request cap, sent until the queue is full: past the
    server's bound on queued work they get 429, not an ever longer queue."""
    with httpx.Client(base_url=tinker.base_url, headers=TINKER_AUTH, timeout=60) as c:
        replies = [c.post("/api/v1/asample", json=_sample_body(32, 2000)) for _ in range(40)]
        _cancel_all(c, replies)
    codes = [r.status_code for r in replies]
    assert 429 in codes, codes
    assert set(codes) <= {200, 429}, codes


def test_tinker_refuses_200k_stop_strings(tinker: Any) -> None:
    """Vector 8: 200,000 stop strings: 400 (each was compared at every token of every row)."""
    with httpx.Client(base_url=tinker.base_url, headers=TINKER_AUTH, timeout=60) as c:
        stops = [f"s{i}" for i in range(200_000)]
        reply = c.post("/api/v1/asample", json=_sample_body(1, 8, stop=stops))
        _cancel_all(c, [reply])
    assert reply.status_code == 400, reply.text[:300]


def test_tinker_cuts_a_client_that_never_finishes_its_headers(tinker: Any) -> None:
    """Vector 8: a request head sent a byte at a time is cut after the header-read timeout."""
    closed = _slow_head("127.0.0.1", tinker.port, 8)
    assert closed is not None and closed < 5, closed
