"""`skyrl serve`'s Anthropic Messages API (`/v1/messages`) over real HTTP on 127.0.0.1: the
official `anthropic` SDK (its own venv, `tests/agents/harnesses/anthropic_driver.py`), raw
HTTP for the wire details, the shared limits, and Claude Code (`claude -p`) editing a file.

Scripted policies (tiny tokenizer, Qwen/Hermes tools template) make the replies known in
advance, non-canonical ids included, so the captures can be checked token by token.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.serving import ServeConfig, start_server
from skyrl_sdk.agents.trajectory import SegmentStart, read_trajectories
from skyrl_sdk.benchmarks import harness_venv

HARNESSES = Path(__file__).parents[1] / "harnesses"
CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "6*7"}}\n</tool_call>'
TOOLS = [
    {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}},
    }
]
HEADERS = {"anthropic-version": "2023-06-01"}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def renderer(tiny_dir):
    from skyrl_sdk.agents.tiny import tiny_renderer

    return tiny_renderer(tiny_dir)


def non_canonical(renderer, text: str) -> list[int]:
    """`text` tokenized one character at a time: same text, not the tokenizer's own ids."""
    ids = [i for ch in text for i in renderer.encode(ch)]
    assert ids != list(renderer.encode(text)) and renderer.decode(ids) == text
    return ids


def expected_ids(renderer, action) -> list[int]:
    """The ids the scripted policy samples for an action (it appends end-of-turn)."""
    ids = list(renderer.encode(action)) if isinstance(action, str) else list(action)
    return [*ids, renderer.end_of_turn_id]


def serve(policy, renderer, tmp_path=None, **kwargs):
    config = ServeConfig(
        model_name="tiny", capture_dir=tmp_path, api_key=kwargs.pop("api_key", None), **kwargs
    )
    return start_server(policy, config, renderer=renderer)


def sdk_python() -> str:
    found = harness_venv.ready("anthropic")
    if found is None:
        pytest.skip(
            f"{harness_venv.venv_dir('anthropic')} is missing: build it with "
            "`python -m skyrl_sdk.benchmarks.harness_venv anthropic`"
        )
    return str(found / "bin" / "python")


def events_of(body: str) -> list[tuple[str, dict]]:
    """A streamed answer's (event name, data) pairs."""
    out = []
    for chunk in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


# -- the official SDK -----------------------------------------------------------------------


def test_anthropic_sdk_tool_round_trip_is_one_exact_segment(renderer, tmp_path) -> None:
    """The SDK's `messages.create` (plain and streamed) and `messages.stream` play a tool round
    trip: one main segment of exactly the scripted ids (a non-canonical reply included); a
    request with another system prompt is an auxiliary segment, left out of training."""
    odd = non_canonical(renderer, CALL)
    script = ["Let me compute.\n" + CALL, odd, "The answer is 42.", "Six times seven! Yes."]
    policy = ScriptedPolicy(script, renderer=renderer)
    with serve(policy, renderer, tmp_path, api_key="main") as server:
        key = server.issue_session_key("claude-1")
        done = subprocess.run(
            [
                sdk_python(),
                str(HARNESSES / "anthropic_driver.py"),
                server.session_url("claude-1")[: -len("/v1")],
                key,
                "tiny",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tempfile.gettempdir(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout)
        trajectory = server.session_trajectory("claude-1")

    first = out["first"]
    assert first["stop_reason"] == "tool_use"
    assert first["content"][0] == {"type": "text", "text": "Let me compute."}
    assert first["content"][1]["type"] == "tool_use" and first["content"][1]["id"].startswith(
        "toolu_"
    )
    assert (first["content"][1]["name"], first["content"][1]["input"]) == ("calc", {"expr": "6*7"})
    assert out["first_usage"]["output_tokens"] == len(expected_ids(renderer, script[0]))
    second = out["second"]
    assert second["stop_reason"] == "tool_use" and second["texts"] == []
    assert [(b["type"], b.get("input")) for b in second["content"]] == [
        ("tool_use", {"expr": "6*7"})
    ]
    assert out["third_text"] == "The answer is 42." and out["third_stop"] == "end_turn"
    assert out["third_events"] == [  # the SDK drops pings (the raw test sees them)
        "message_start",
        "content_block_start",
        "content_block_delta",
        *["content_block_delta"] * (out["third_events"].count("content_block_delta") - 1),
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out["count_tokens"] > 0
    assert out["side"] == {
        "content": [{"type": "text", "text": "Six times seven"}],
        "stop_reason": "stop_sequence",
        "stop_sequence": "!",
    }
    errors = out["errors"]
    assert errors["bad_model"]["class"] == "NotFoundError"
    assert errors["bad_model"]["body"]["type"] == "error"
    assert errors["bad_model"]["body"]["error"]["type"] == "not_found_error"
    assert errors["bad_temperature"]["class"] == "BadRequestError"
    assert "temperature" in errors["bad_temperature"]["body"]["error"]["message"]
    assert errors["tool_choice_any"]["status"] == 400
    assert "tool_choice" in errors["tool_choice_any"]["body"]["error"]["message"]
    assert errors["wrong_key"]["class"] == "AuthenticationError"
    assert errors["wrong_key"]["body"]["error"]["type"] == "authentication_error"

    # The capture: the main conversation is one segment of exactly the scripted ids.
    assert trajectory is not None
    starts = [s.start for s in trajectory.segments]
    assert starts == [SegmentStart.EPISODE, SegmentStart.AUXILIARY]
    main = [t for t in trajectory.turns if t.segment == 0]
    assert [list(t.token_ids) for t in main] == [expected_ids(renderer, a) for a in script[:3]]
    (side,) = [t for t in trajectory.turns if t.segment == 1]
    assert list(side.token_ids) == expected_ids(renderer, script[3])
    # Each main prompt extends the previous one by exactly what was sampled plus the results.
    ids = trajectory.segment_ids(0)
    assert renderer.decode(ids).count("<tool_response>") == 2
    (sample,) = trajectory.training_samples()  # the side conversation is not trained on
    assert list(sample.input_ids) == ids
    assert len(trajectory.training_samples(auxiliary=True)) == 2
    (on_disk,) = read_trajectories(tmp_path / "claude-1.jsonl")
    assert [s.start for s in on_disk.segments] == starts
    assert "Error: division by zero" in renderer.decode(ids)


# -- the wire, by hand ----------------------------------------------------------------------


def test_raw_stream_event_order_and_stop_reasons(renderer) -> None:
    """Events in Anthropic's order with a text block then a tool_use block whose input comes
    as one input_json_delta; max_tokens and tool_use stop reasons; usage counts the ids."""
    script = ["Checking.\n" + CALL, "a long reply that is cut"]
    policy = ScriptedPolicy(script, renderer=renderer)
    with serve(policy, renderer) as server:
        body = {
            "model": "tiny",
            "max_tokens": 100,
            "stream": True,
            "tools": TOOLS,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "6*7?"}]}],
        }
        url = f"{server.base_url}/messages"
        r = httpx.post(url, json=body, headers=HEADERS, timeout=30)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = events_of(r.text)
        names = [name for name, _ in events]
        assert all(name == data["type"] for name, data in events)
        assert names[:3] == ["message_start", "content_block_start", "ping"]
        assert names[-2:] == ["message_delta", "message_stop"]
        starts = [d for n, d in events if n == "content_block_start"]
        assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
        assert [s["index"] for s in starts] == [0, 1]
        text = "".join(
            d["delta"]["text"] for n, d in events if n == "content_block_delta" and d["index"] == 0
        )
        assert text == "Checking."
        (partial,) = [
            d["delta"] for n, d in events if d.get("index") == 1 and n == "content_block_delta"
        ]
        assert partial["type"] == "input_json_delta"
        assert json.loads(partial["partial_json"]) == {"expr": "6*7"}
        delta = events[-2][1]
        assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
        assert delta["usage"]["output_tokens"] == len(expected_ids(renderer, script[0]))
        start = events[0][1]["message"]
        assert start["usage"]["input_tokens"] > 0 and start["content"] == []

        cut = httpx.post(
            url,
            json={
                "model": "tiny",
                "max_tokens": 3,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers=HEADERS,
            timeout=30,
        ).json()
        assert cut["stop_reason"] == "max_tokens" and cut["usage"]["output_tokens"] == 3


def test_errors_have_anthropics_shape(renderer) -> None:
    """Every refusal on the Messages paths, the key check and body cap included, is
    `{"type": "error", "error": {"type", "message"}}`; chat keeps OpenAI's shape."""
    policy = ScriptedPolicy(["x"], renderer=renderer)
    with serve(policy, renderer, api_key="main", max_request_bytes=10_000) as server:
        url = f"{server.base_url}/messages"
        ok = {"x-api-key": "main", **HEADERS}
        base = {"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        cases = [
            ({}, base, 401, "authentication_error", "key"),
            (ok, {**base, "max_tokens": None}, 400, "invalid_request_error", "max_tokens"),
            (
                ok,
                {k: v for k, v in base.items() if k != "max_tokens"},
                400,
                "invalid_request_error",
                "max_tokens",
            ),
            (ok, {**base, "model": "gpt"}, 404, "not_found_error", "model"),
            (
                ok,
                {
                    **base,
                    "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
                },
                400,
                "invalid_request_error",
                "messages.0.content.0",
            ),
            (
                ok,
                {
                    **base,
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "{"},
                    ],
                },
                400,
                "invalid_request_error",
                "prefill",
            ),
            (
                ok,
                {**base, "tools": [{"name": "web", "type": "web_search_20250305"}]},
                400,
                "invalid_request_error",
                "tools.0",
            ),
            (
                ok,
                {**base, "tools": TOOLS, "tool_choice": {"type": "tool", "name": "calc"}},
                400,
                "invalid_request_error",
                "tool_choice",
            ),
            (
                ok,
                {**base, "stop_sequences": ["a"] * 5},
                400,
                "invalid_request_error",
                "stop_sequences",
            ),
            (
                ok,
                {**base, "stop_sequences": ["x" * 300]},
                400,
                "invalid_request_error",
                "stop_sequences",
            ),
            (ok, {**base, "system": "x" * 20_000}, 413, "request_too_large", "limit"),
        ]
        for headers, body, status, kind, said in cases:
            r = httpx.post(url, json=body, headers=headers, timeout=30)
            assert r.status_code == status, (body, r.text)
            data = r.json()
            assert data["type"] == "error" and data["error"]["type"] == kind, data
            assert said in data["error"]["message"], data
        r = httpx.post(
            f"{server.base_url}/messages/count_tokens", json={"model": "tiny"}, headers=ok
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        chat = httpx.post(f"{server.base_url}/chat/completions", json={}, headers=ok)
        assert chat.status_code == 400 and "type" not in chat.json()  # OpenAI's shape there
        assert policy.calls == 0


def test_count_tokens_counts_the_prompt_the_reply_would_get(renderer) -> None:
    """count_tokens is the length of the prompt a Messages request renders to (known replies
    as their sampled ids), and captures nothing."""
    policy = ScriptedPolicy(["Hello there."], renderer=renderer)
    with serve(policy, renderer) as server:
        body = {
            "model": "tiny",
            "system": "Be brief.",
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "hi"}],
        }
        counted = httpx.post(
            f"{server.base_url}/messages/count_tokens", json=body, headers=HEADERS
        ).json()
        answer = httpx.post(
            f"{server.base_url}/messages", json={**body, "max_tokens": 50}, headers=HEADERS
        ).json()
        assert counted == {"input_tokens": answer["usage"]["input_tokens"]}
        assert policy.calls == 1
        trajectory = server.session_trajectory("default")
        assert (
            len(trajectory.turns) == 1
            and len(trajectory.segments[0].prompt_ids) == counted["input_tokens"]
        )


class ShortContext(ScriptedPolicy):
    """A scripted policy whose model has a 48-token context."""

    max_context_tokens = 48


def test_max_tokens_beyond_the_context_is_clamped(renderer) -> None:
    """Claude Code asks for 32,000 tokens: on a model with a small context the reply may run to
    its end (stop_reason max_tokens), rather than the 400 chat completions answer."""
    policy = ShortContext(["y" * 100], renderer=renderer)
    with serve(policy, renderer) as server:
        body = {"model": "tiny", "max_tokens": 32_000, "messages": HI}
        answer = httpx.post(f"{server.base_url}/messages", json=body, headers=HEADERS).json()
        assert answer["type"] == "message", answer
        assert answer["stop_reason"] == "max_tokens"
        assert answer["usage"]["input_tokens"] + answer["usage"]["output_tokens"] == 48
        chat = {"model": "tiny", "max_tokens": 32_000, "messages": HI}
        refused = httpx.post(f"{server.base_url}/chat/completions", json=chat)
        assert refused.status_code == 400  # chat completions keeps OpenAI's check


# -- Claude Code ----------------------------------------------------------------------------


def claude_env(base_url: str, key: str, home: Path) -> dict[str, str]:
    """What Claude Code needs to run offline against the server: its base URL and key, every
    model alias on the served name (sub-agents and side requests name `haiku`, `sonnet`, ...),
    non-essential traffic, updates, telemetry and error reports off, a HOME of its own.
    `IS_SANDBOX=1` lets `--permission-mode bypassPermissions` run as root (CI containers)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "IS_SANDBOX": "1",
    }
    for alias in ("HAIKU", "SONNET", "OPUS"):
        env[f"ANTHROPIC_DEFAULT_{alias}_MODEL"] = "tiny"
    env["CLAUDE_CODE_SUBAGENT_MODEL"] = "tiny"
    return env


CLAUDE_FLAGS = (
    "--model",
    "tiny",
    "--permission-mode",
    "bypassPermissions",
    "--output-format",
    "json",
)
"""`claude -p` flags: the served model, no permission prompts, a JSON result on stdout."""


def tool_call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_claude_code_writes_a_file_main_one_segment_subagent_auxiliary(renderer, tmp_path) -> None:
    """`claude -p` (2.1.332) against a session URL: the main agent delegates to a sub-agent
    (its Agent tool, scripted as non-canonical ids), the sub-agent's Write tool creates the
    file, the main agent answers. The main conversation is one segment of exactly its
    scripted ids; the sub-agent's two turns are one auxiliary segment, not trained on."""
    claude = harness_venv.npm_ready("claude-code")
    if claude is None:
        pytest.skip(
            f"{harness_venv.npm_dir('claude-code')} is missing: build it with "
            "`python -m skyrl_sdk.benchmarks.harness_venv claude-code`"
        )
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    target = work / "hello.txt"
    delegate = tool_call(
        "Agent",
        description="Write the file",
        prompt="Write hello world to hello.txt",
        subagent_type="general-purpose",
        run_in_background=False,
    )
    main = [non_canonical(renderer, delegate), "Done: hello.txt holds hello world."]
    side = [tool_call("Write", file_path=str(target), content="hello world\n"), "Wrote it."]
    policy = ScriptedPolicy([main[0], *side, main[1]], renderer=renderer)
    with serve(policy, renderer, tmp_path / "capture", api_key="main") as server:
        key = server.issue_session_key("claude")
        done = subprocess.run(
            [str(claude), "-p", "Write hello world to hello.txt", *CLAUDE_FLAGS],
            cwd=work,
            env=claude_env(server.session_url("claude").removesuffix("/v1"), key, home),
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        trajectory = server.session_trajectory("claude")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    result = json.loads(done.stdout)
    assert result["result"] == main[1] and not result["is_error"]
    assert result["subagent_stats"]["completed"] == 1
    assert target.read_text() == "hello world\n"

    assert trajectory is not None
    assert [s.start for s in trajectory.segments] == [SegmentStart.EPISODE, SegmentStart.AUXILIARY]
    turns = {k: [t for t in trajectory.turns if t.segment == k] for k in (0, 1)}
    assert [list(t.token_ids) for t in turns[0]] == [expected_ids(renderer, a) for a in main]
    assert [list(t.token_ids) for t in turns[1]] == [expected_ids(renderer, a) for a in side]
    assert [c.name for c in turns[0][0].tool_calls] == ["Agent"]
    assert [c.name for c in turns[1][0].tool_calls] == ["Write"]
    # The sub-agent's report came back to the main agent as the Agent call's result.
    assert "Wrote it." in renderer.decode(list(turns[0][0].observation_ids))
    (sample,) = trajectory.training_samples()
    assert list(sample.input_ids) == trajectory.segment_ids(0)
    assert sum(sample.loss_mask) == sum(len(t.token_ids) for t in turns[0])
    (on_disk,) = read_trajectories(tmp_path / "capture" / "claude.jsonl")
    assert [t.token_ids for t in on_disk.turns] == [t.token_ids for t in trajectory.turns]


def test_claude_code_bash_edit_is_one_exact_segment(renderer, tmp_path) -> None:
    """The main agent's own Bash tool changes a file (the call scripted as non-canonical
    ids): the session is one segment of exactly the scripted ids, nothing auxiliary."""
    claude = harness_venv.npm_ready("claude-code")
    if claude is None:
        pytest.skip(f"{harness_venv.npm_dir('claude-code')} is missing")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "hello.txt").write_text("hello there\n")
    bash = tool_call("Bash", command="sed -i s/there/world/ hello.txt", description="Edit")
    script = [non_canonical(renderer, bash), "hello.txt now says hello world."]
    policy = ScriptedPolicy(script, renderer=renderer)
    with serve(policy, renderer, api_key="main") as server:
        key = server.issue_session_key("bash")
        done = subprocess.run(
            [str(claude), "-p", "Make hello.txt say hello world", *CLAUDE_FLAGS],
            cwd=work,
            env=claude_env(server.session_url("bash").removesuffix("/v1"), key, home),
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        trajectory = server.session_trajectory("bash")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert json.loads(done.stdout)["result"] == script[1]
    assert (work / "hello.txt").read_text() == "hello world\n"
    assert [s.start for s in trajectory.segments] == [SegmentStart.EPISODE]
    assert [list(t.token_ids) for t in trajectory.turns] == [
        expected_ids(renderer, a) for a in script
    ]
    assert "<tool_response>" in renderer.decode(list(trajectory.turns[0].observation_ids))


# -- the limits chat completions has --------------------------------------------------------


def test_keys_x_api_key_or_bearer_and_only_the_sessions_own(renderer) -> None:
    """A session key opens its session's Messages URL as `x-api-key` or as a Bearer token,
    with or without `anthropic-version`; another session's URL and the base URL refuse it
    (401, Anthropic's shape)."""
    policy = ScriptedPolicy(["one", "two"], renderer=renderer)
    with serve(policy, renderer, api_key="main") as server:
        key = server.issue_session_key("mine")
        server.issue_session_key("theirs")
        body = {"model": "tiny", "max_tokens": 10, "messages": HI}
        mine = f"{server.session_url('mine')}/messages"
        assert httpx.post(mine, json=body, headers={"x-api-key": key, **HEADERS}).status_code == 200
        bearer = {"Authorization": f"Bearer {key}"}
        assert httpx.post(mine, json=body, headers=bearer).json()["content"][0]["text"] == "two"
        for url in (f"{server.session_url('theirs')}/messages", f"{server.base_url}/messages"):
            r = httpx.post(url, json=body, headers={"x-api-key": key, **HEADERS})
            assert r.status_code == 401
            assert r.json()["error"]["type"] == "authentication_error"
        assert policy.calls == 2


def test_the_session_token_budget_counts_messages_streamed_or_not(renderer) -> None:
    """Prompt and generated tokens of Messages requests, streamed or not, come out of the
    session key's budget; past it, 429 `rate_limit_error` before anything is generated."""
    policy = ScriptedPolicy(["abc", "defg", "never"], renderer=renderer)
    with serve(policy, renderer, api_key="main") as server:
        key = server.issue_session_key("s", token_budget=200)
        budget = server._keys.budget("s")
        url = f"{server.session_url('s')}/messages"
        auth = {"x-api-key": key, **HEADERS}
        body = {"model": "tiny", "max_tokens": 10, "messages": HI}
        first = httpx.post(url, json=body, headers=auth).json()
        assert budget.used == first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
        streamed = httpx.post(url, json={**body, "stream": True}, headers=auth)
        (delta,) = [d for n, d in events_of(streamed.text) if n == "message_delta"]
        deadline = time.monotonic() + 10
        while budget.reserved and time.monotonic() < deadline:
            time.sleep(0.01)  # a streamed answer settles just after its last event
        # The same prompt again: no new prompt tokens, only what was generated.
        spent = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
        assert budget.used == spent + delta["usage"]["output_tokens"]
        refused = httpx.post(url, json={**body, "max_tokens": 500}, headers=auth)
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert "budget" in refused.json()["error"]["message"]
        assert policy.calls == 2


def test_fair_share_and_queue_cap_hold_for_messages(tiny_dir, renderer) -> None:
    """One session's concurrent Messages requests hold at most its share of the engine's
    batch, past its queue cap they get 429 `rate_limit_error`, and another session is served
    beside them."""
    import threading

    from skyrl_sdk.agents.engine import LocalEngine
    from skyrl_sdk.agents.engine.fairness import FairnessLimits

    engine = LocalEngine.from_pretrained(
        tiny_dir, name="tiny", max_batch_size=8, fairness=FairnessLimits(max_rows=2, max_queued=2)
    )
    with start_server(engine, ServeConfig(model_name="tiny"), renderer=renderer) as server:
        body = {"model": "tiny", "max_tokens": 40, "messages": HI, "metadata": {"user_id": "hog"}}
        url = f"{server.base_url}/messages"
        outcomes: list[httpx.Response] = []

        def one() -> None:
            outcomes.append(httpx.post(url, json=body, headers=HEADERS, timeout=120))

        threads = [threading.Thread(target=one, daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        peak, beside = 0, None
        while any(t.is_alive() for t in threads):
            rows = engine.running_by_tenant().get("hog", 0)
            peak = max(peak, rows)
            if rows and beside is None:
                other = {**body, "max_tokens": 4, "metadata": {"user_id": "victim"}}
                beside = httpx.post(url, json=other, headers=HEADERS, timeout=120)
                beside_during = any(t.is_alive() for t in threads)
            time.sleep(0.002)
        for t in threads:
            t.join(120)
    statuses = sorted(r.status_code for r in outcomes)
    assert 200 in statuses and 429 in statuses, statuses
    refused = next(r for r in outcomes if r.status_code == 429).json()
    assert refused["type"] == "error" and refused["error"]["type"] == "rate_limit_error"
    assert peak <= 2, f"one session held {peak} rows"
    assert beside is not None and beside.status_code == 200 and beside_during


def test_the_header_deadline_holds_on_messages_and_spares_a_long_stream(renderer) -> None:
    """A connection that never finishes its request head is closed after the deadline; a
    streamed message that outlasts the deadline is not cut."""
    policy = ScriptedPolicy(["x" * 30], renderer=renderer, token_delay_s=0.03)
    with serve(policy, renderer, header_timeout_s=0.5) as server:
        started = time.monotonic()
        body = {"model": "tiny", "max_tokens": 100, "stream": True, "messages": HI}
        r = httpx.post(f"{server.base_url}/messages", json=body, headers=HEADERS, timeout=60)
        took = time.monotonic() - started
        events = events_of(r.text)
        assert events[-1][0] == "message_stop" and took > 0.5
        text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
        assert text == "x" * 30
        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")  # never finished
            s.settimeout(5)
            started = time.monotonic()
            assert s.recv(100) == b""
            assert time.monotonic() - started < 2


# -- forced tool use ------------------------------------------------------------------------


WEATHER = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Paris", "Rome", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
    {
        "name": "get_time",
        "description": "The time in a zone.",
        "input_schema": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
]
"""Closed schemas: the tiny random model fills them within a few dozen tokens."""


def test_forced_tool_choice_is_a_constrained_call_on_the_tiny_model(tiny_dir, renderer) -> None:
    """`tool_choice` `any` and a named `tool` on the local engine: every reply is tool_use
    blocks whose inputs validate, produced by the grammar's mask (the captured turn is marked
    `constrained`, its ids decode to the Hermes call), streamed or not."""
    import jsonschema

    from skyrl_sdk.agents.engine import LocalEngine

    engine = LocalEngine.from_pretrained(tiny_dir, name="tiny")
    schemas = {t["name"]: t["input_schema"] for t in WEATHER}
    with start_server(engine, ServeConfig(model_name="tiny"), renderer=renderer) as server:
        url = f"{server.base_url}/messages"
        cases = [
            {"type": "any"},
            {"type": "tool", "name": "get_weather"},
            {"type": "any", "disable_parallel_tool_use": True},
            {"type": "tool", "name": "get_weather"},  # streamed
        ]
        for i, choice in enumerate(cases):
            body = {
                "model": "tiny",
                "max_tokens": 200,
                "messages": [{"role": "user", "content": "Weather in Paris for 3 days?"}],
                "tools": WEATHER,
                "tool_choice": choice,
                "seed": i,
                "metadata": {"user_id": f"forced-{i}"},
                "stream": i == 3,
            }
            r = httpx.post(url, json=body, headers=HEADERS, timeout=120)
            assert r.status_code == 200, r.text
            if body["stream"]:
                events = events_of(r.text)
                (delta,) = [d for n, d in events if n == "message_delta"]
                assert delta["delta"]["stop_reason"] == "tool_use"
                partial = [
                    d["delta"]["partial_json"]
                    for n, d in events
                    if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
                ]
                inputs = [json.loads(p) for p in partial]
                names = [
                    d["content_block"]["name"] for n, d in events if n == "content_block_start"
                ]
            else:
                answer = r.json()
                assert answer["stop_reason"] == "tool_use", answer
                assert {b["type"] for b in answer["content"]} == {"tool_use"}
                inputs = [b["input"] for b in answer["content"]]
                names = [b["name"] for b in answer["content"]]
            assert names and (choice["type"] == "any" or names == ["get_weather"])
            assert len(names) == 1 or not choice.get("disable_parallel_tool_use")
            for name, given in zip(names, inputs, strict=True):
                jsonschema.validate(given, schemas[name])
            turn = server.session_trajectory(f"forced-{i}").turns[0]
            assert turn.constrained and [c.name for c in turn.tool_calls] == names
            ids = list(turn.token_ids)
            if ids[-1] in renderer.stop_token_ids:  # a grammar that ended may stop without it
                ids = ids[:-1]
            text = renderer.decode(ids)
            assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")


def test_a_session_read_back_from_its_file_continues_its_main_segment(renderer, tmp_path) -> None:
    """Main turn, side request, the session dropped from memory, main turn again: read back
    from its capture file, the session continues the main segment (not the side one)."""
    policy = ScriptedPolicy(["Main one.", "A title", "Main two."], renderer=renderer)
    with serve(policy, renderer, tmp_path) as server:
        url = f"{server.session_url('r')}/messages"
        main = {"model": "tiny", "max_tokens": 20, "system": "You help.", "messages": HI}
        first = httpx.post(url, json=main, headers=HEADERS).json()
        side = {**main, "system": "Write a title."}
        assert httpx.post(url, json=side, headers=HEADERS).json()["content"][0]["text"] == "A title"
        server.end_session("r")
        reply = {"role": "assistant", "content": first["content"]}
        grown = [*HI, reply, {"role": "user", "content": "More?"}]
        httpx.post(url, json={**main, "messages": grown}, headers=HEADERS).raise_for_status()
        trajectory = server.session_trajectory("r")
    assert [s.start for s in trajectory.segments] == [SegmentStart.EPISODE, SegmentStart.AUXILIARY]
    assert [t.segment for t in trajectory.turns] == [0, 1, 0]
    assert [t.action for t in trajectory.turns] == ["Main one.", "A title", "Main two."]


def test_a_policy_failure_is_an_anthropic_api_error_streamed_or_not(renderer) -> None:
    """A policy that fails (a script with no reply left) answers 500 `api_error` in
    Anthropic's shape, before any event of a streamed answer is sent."""
    policy = ScriptedPolicy([], renderer=renderer)
    with serve(policy, renderer) as server:
        for stream in (False, True):
            body = {"model": "tiny", "max_tokens": 5, "messages": HI, "stream": stream}
            r = httpx.post(f"{server.base_url}/messages", json=body, headers=HEADERS)
            assert r.status_code == 500
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
            assert "script" in r.json()["error"]["message"]
