"""`skyrl serve`'s per-session limits through the real `openai` SDK: token budgets (streamed and
not, disconnects), stop-list caps on every route, the header-read deadline (which must not cut
a long answer or a kept-alive connection)."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
import openai
import pytest

from skyrl_sdk.agents.serving import ServeConfig, start_server

MAIN = "sk-limits-main"
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> Any:
    from skyrl_sdk.agents.engine import LocalEngine
    from skyrl_sdk.agents.tiny import tiny_renderer

    engine = LocalEngine.from_pretrained(tiny_dir, name="tiny")
    yield engine, tiny_renderer(tiny_dir)


def _serve(tiny: Any, **config: Any) -> Any:
    engine, renderer = tiny
    return start_server(engine, ServeConfig(api_key=MAIN, **config), renderer=renderer)


def _client(server: Any, session: str, **issue: Any) -> openai.OpenAI:
    key = server.issue_session_key(session, **issue)
    return openai.OpenAI(base_url=server.session_url(session), api_key=key, max_retries=0)


def _settled(budget: Any) -> None:
    deadline = time.monotonic() + 30
    while budget.reserved and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_budget_counts_new_prompt_and_generated_tokens_streamed_or_not(tiny: Any) -> None:
    with _serve(tiny, session_token_budget=1000) as server:
        api = _client(server, "s")
        budget = server._keys.budget("s")
        plain = api.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=20, n=2)
        assert budget.used == 3 + plain.usage.completion_tokens and budget.reserved == 0
        stream = api.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=20, stream=True)
        text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
        _settled(budget)  # a streamed answer settles just after its last event
        # The same prompt again: no new prompt tokens (the session had them), 20 generated.
        assert text and budget.used == 3 + plain.usage.completion_tokens + 20
        assert budget.reserved == 0
        # The conversation grows: only the tokens after the last prompt + reply count.
        grown = [5, 6, 7, *budget.last[3:], 11, 12]
        api.completions.create(model="tiny", prompt=grown, max_tokens=5)
        assert budget.used == 3 + plain.usage.completion_tokens + 20 + 2 + 5
        with pytest.raises(openai.RateLimitError) as refused:
            api.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=1000)
        assert refused.value.body["code"] == "session_token_budget_exceeded"
        assert "1000-token budget" in refused.value.body["message"]


def test_a_client_that_hangs_up_is_charged_its_whole_reservation(tiny: Any) -> None:
    with _serve(tiny, session_token_budget=100_000) as server:
        key = server.issue_session_key("s")
        body = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 1500, "stream": True}
        url = f"{server.session_url('s')}/completions"
        with httpx.stream("POST", url, json=body, headers={"Authorization": f"Bearer {key}"}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    break  # hang up after the first event
        budget = server._keys.budget("s")
        _settled(budget)
        assert budget.used == 3 + 1500 and budget.reserved == 0


def test_no_budget_when_the_key_or_the_server_says_so(tiny: Any) -> None:
    with _serve(tiny, session_token_budget=None) as server:
        _client(server, "a")
        assert server._keys.budget("a") is None
    with _serve(tiny, session_token_budget=10) as server:
        api = _client(server, "b", token_budget=0)
        assert server._keys.budget("b") is None
        assert api.completions.create(model="tiny", prompt=[5], max_tokens=30).choices


@pytest.mark.parametrize(
    ("route", "change", "param"),
    [
        ("chat", {"stop": ["x"] * 5}, "stop"),
        ("chat", {"stop": "y" * 257}, "stop"),
        ("completions", {"stop": ["z" * 300]}, "stop"),
        ("completions", {"stop_token_ids": list(range(257))}, "stop_token_ids"),
    ],
)
def test_stop_lists_are_capped_on_every_route(
    tiny: Any, route: str, change: dict[str, Any], param: str
) -> None:
    with _serve(tiny) as server:
        api = openai.OpenAI(base_url=server.base_url, api_key=MAIN, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            if route == "chat":
                api.chat.completions.create(
                    model="tiny", messages=MESSAGES, max_tokens=2, extra_body=change
                )
            else:
                api.completions.create(model="tiny", prompt="x", max_tokens=2, extra_body=change)
        assert refused.value.body["param"] == param


def test_the_header_deadline_spares_long_answers_and_kept_alive_connections(tiny: Any) -> None:
    with _serve(tiny, header_timeout_s=0.5) as server:
        with httpx.Client(headers={"Authorization": f"Bearer {MAIN}"}, timeout=60) as http:
            body = {"model": "tiny", "prompt": [5, 6], "max_tokens": 1000, "stream": True}
            started = time.monotonic()
            with http.stream("POST", f"{server.base_url}/completions", json=body) as r:
                events = [line for line in r.iter_lines() if line.startswith("data: ")]
            assert events[-1] == "data: [DONE]"
            took = time.monotonic() - started
            time.sleep(0.2)  # idle on the kept-alive connection, under the deadline
            assert http.get(f"{server.root_url}/health").status_code == 200
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finished
            s.settimeout(5)
            started = time.monotonic()
            assert s.recv(100) == b""
            assert time.monotonic() - started < 2
    assert took > 0.5 or len(events) > 10  # the answer outlived the deadline, or was long
