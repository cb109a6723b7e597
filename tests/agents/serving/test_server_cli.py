"""`skyrl serve --policy SPEC --capture DIR` as a user runs it, and the proxy to an upstream."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from skyrl_sdk.agents.trajectory import read_trajectories

SKYRL = [sys.executable, "-m", "skyrl_gym.cli"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(proc: subprocess.Popen, url: str) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"skyrl serve exited: {proc.stdout.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail("skyrl serve did not come up")


def test_serve_scripted_with_capture_then_view(tmp_path) -> None:
    from skyrl_sdk.agents.tiny import tiny_renderer

    renderer = tiny_renderer()
    call = '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
    ids = [i for ch in "done" for i in renderer.encode(ch)]  # a non-canonical reply
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call, ids]))
    capture = tmp_path / "capture"
    port = free_port()
    proc = subprocess.Popen(
        [
            *SKYRL,
            "serve",
            "--policy",
            f"scripted:{script}",
            "--port",
            str(port),
            "--capture",
            str(capture),
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_up(proc, f"http://127.0.0.1:{port}")
        api = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/sessions/run-1/v1", api_key="x", max_retries=0
        )
        messages: list[dict] = [{"role": "user", "content": "list files"}]
        first = api.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
        (tool_call,) = first.choices[0].message.tool_calls
        messages.append(
            first.choices[0].message.model_dump(
                exclude_none=True, include={"role", "content", "tool_calls"}
            )
        )
        messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": "a.txt"})
        second = api.chat.completions.create(
            model="scripted", messages=messages, tools=TOOLS, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in second if c.choices) == "done"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    path = capture / "run-1.jsonl"
    (trajectory,) = read_trajectories(path)
    assert len(trajectory.segments) == 1 and len(trajectory.turns) == 2
    assert list(trajectory.turns[1].token_ids) == [*ids, renderer.end_of_turn_id]
    (sample,) = trajectory.training_samples()
    assert sum(sample.loss_mask) == sum(len(t.token_ids) for t in trajectory.turns)
    view = subprocess.run(
        [*SKYRL, "view", str(capture), "-o", str(tmp_path / "report.html")],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert view.returncode == 0, view.stdout + view.stderr
    assert "run-1" in (tmp_path / "report.html").read_text()


def test_serve_refuses_an_unknown_policy() -> None:
    out = subprocess.run(
        [*SKYRL, "serve", "--policy", "no-such-thing", "--port", str(free_port())],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    said = " ".join((out.stdout + out.stderr).split())  # rich wraps long lines
    assert "policy spec 'no-such-thing': not 'tiny', a model directory" in said
    assert "accepted: tiny" in said


def test_proxy_to_an_upstream_is_token_exact(tiny_dir) -> None:
    """`--policy URL --tokenizer DIR`: requests go upstream as token ids; the proxy's answer
    carries the upstream's sampled ids, equal to asking the upstream directly."""
    from skyrl_sdk.agents.engine import LocalEngine
    from skyrl_sdk.agents.policy_spec import PolicyUse, load_policy
    from skyrl_sdk.agents.serving import ServeConfig, start_server
    from skyrl_sdk.agents.tiny import tiny_renderer

    engine = LocalEngine.from_pretrained(tiny_dir, name="tiny")
    renderer = tiny_renderer(tiny_dir)
    with start_server(engine, ServeConfig(model_name="tiny"), renderer=renderer) as upstream:
        loaded = load_policy(
            upstream.base_url, tokenizer=str(tiny_dir), model="tiny", use=PolicyUse.SERVE
        )
        config = ServeConfig(model_name="proxied")
        with start_server(loaded.policy, config, renderer=loaded.renderer) as proxy:
            ask = {
                "messages": [{"role": "user", "content": "count"}],
                "max_tokens": 12,
                "seed": 5,
                "extra_body": {"return_token_ids": True},
            }
            direct = openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
            via = openai.OpenAI(base_url=proxy.base_url, api_key="x", max_retries=0)
            a = direct.chat.completions.create(model="tiny", **ask)
            b = via.chat.completions.create(model="proxied", user="u", **ask)
            captured = proxy.session_trajectory("u")
    assert b.choices[0].model_extra["token_ids"] == a.choices[0].model_extra["token_ids"]
    assert b.choices[0].message.content == a.choices[0].message.content
    assert captured is not None and captured.trainable
    assert list(captured.turns[0].token_ids) == a.choices[0].model_extra["token_ids"]


def _serve_and_call(tmp_path, *extra: str) -> str:
    """Start `skyrl serve` on a scripted policy, make one good and one bad request, stop it;
    its output."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["hello"]))
    port = free_port()
    proc = subprocess.Popen(
        [*SKYRL, "serve", "--policy", f"scripted:{script}", "--port", str(port), *extra],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_up(proc, f"http://127.0.0.1:{port}")
        base = f"http://127.0.0.1:{port}/sessions/s-1/v1"
        ok = httpx.post(
            f"{base}/chat/completions",
            json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert ok.status_code == 200, ok.text
        bad = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}, timeout=30)
        assert bad.status_code >= 400
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    return proc.stdout.read().decode()


def test_serve_logs_one_line_per_request_and_quiet_turns_it_off(tmp_path) -> None:
    said = _serve_and_call(tmp_path)
    lines = [line for line in said.splitlines() if "/chat/completions" in line]
    assert len(lines) == 2, said
    assert "POST /sessions/s-1/v1/chat/completions 200" in lines[0]
    assert "POST /v1/chat/completions 4" in lines[1]
    assert "/health" not in said  # the readiness polls are not logged
    quiet = _serve_and_call(tmp_path, "--quiet")
    assert "/chat/completions" not in quiet and "serving scripted" in quiet
