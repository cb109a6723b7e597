"""End to end: `skyrl serve` on 127.0.0.1 with an API key, driven by `OpenAIClient` through
`skyrl eval` (which sends `$SKYRL_API_KEY`) and by the official `openai` SDK; killing `skyrl eval`
midway and finishing with `--resume`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_sdk.agents.trajectory import StopReason, read_trajectories

SKYRL = [sys.executable, "-m", "skyrl_gym.cli"]
API_KEY = "sk-e2e-test"
"""The key the module's server requires; `skyrl eval` reads it from $SKYRL_API_KEY."""
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "SKYRL_API_KEY": API_KEY,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_dir):
    port = free_port()
    proc = subprocess.Popen(
        [
            *SKYRL,
            "serve",
            "--model",
            str(tiny_dir),
            "--port",
            str(port),
            "--name",
            "tiny",
            "--api-key",
            API_KEY,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"skyrl serve exited: {proc.stdout.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("skyrl serve did not come up")
    yield f"{url}/v1"
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_eval(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SKYRL, "eval", *args], env=ENV, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_eval_against_local_openai_server_is_token_exact(server, tiny_dir, tmp_path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    proc = run_eval(
        "math",
        "--policy",
        server,
        "--tokenizer",
        str(tiny_dir),
        "--num",
        "4",
        "--concurrency",
        "4",
        "--max-turns",
        "2",
        "--max-tokens",
        "24",
        "--seed",
        "0",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mean reward" in proc.stdout and "trainable episodes" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["summary"]["episodes"] == 4 and results["summary"]["trainable"] == 4
    assert results["policy"].startswith("openai:http://127.0.0.1")
    trajectories = read_trajectories(out / "trajectories.jsonl")
    assert sorted(t.episode_id for t in trajectories) == [t["task_id"] for t in bundled_tasks()[:4]]
    assert all(t.stop_reason in (StopReason.MAX_TURNS, StopReason.DONE) for t in trajectories)
    # The ids and logprobs that crossed HTTP are the model's: recompute them locally.
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    for t in trajectories[:2]:
        [sample] = t.training_samples()
        with torch.no_grad():
            logits = model(torch.tensor([list(sample.input_ids)])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        for pos, (m, token, logprob) in enumerate(
            zip(sample.loss_mask, sample.input_ids, sample.logprobs, strict=True)
        ):
            if m:
                assert abs(float(lp[pos - 1, token]) - logprob) < 1e-3


@pytest.mark.slow
def test_eval_through_chat_completions_is_marked_text_only(server, tiny_dir, tmp_path) -> None:
    out = tmp_path / "chat"
    proc = run_eval(
        "math",
        "--policy",
        server,
        "--tokenizer",
        str(tiny_dir),
        "--api",
        "chat",
        "--num",
        "2",
        "--max-turns",
        "2",
        "--max-tokens",
        "16",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["summary"]["episodes"] == 2 and results["summary"]["trainable"] == 0
    assert all(
        t.text_only and not t.trainable for t in read_trajectories(out / "trajectories.jsonl")
    )


@pytest.mark.slow
def test_openai_sdk_with_the_key(server) -> None:
    """The official `openai` SDK works with the server's key and gets 401 without it."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server, api_key=API_KEY, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    done = client.completions.create(model="tiny", prompt="1 + 1 =", max_tokens=4, seed=0)
    assert done.choices[0].text is not None and done.usage.completion_tokens >= 1
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4, seed=0
    )
    assert chat.choices[0].message.role == "assistant"
    wrong = openai.OpenAI(base_url=server, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        wrong.completions.create(model="tiny", prompt="x", max_tokens=1)
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"


def write_script(path: Path, delay: float) -> Path:
    actions = {
        t["task_id"]: [
            f"<calculator>{t['expression']}</calculator>",
            f"<answer>{t['answer']}</answer>",
        ]
        for t in bundled_tasks()
    }
    path.write_text(json.dumps({"actions": actions, "delay_s": delay}))
    return path


@pytest.mark.slow
def test_killed_eval_resumes_without_redoing_or_losing_episodes(tmp_path) -> None:
    script = write_script(tmp_path / "script.json", delay=0.25)
    out = tmp_path / "run"
    args = [
        "math",
        "--policy",
        f"scripted:{script}",
        "--num",
        "12",
        "--concurrency",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        [*SKYRL, "eval", *args], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    path = out / "trajectories.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no cleanup runs
    proc.wait()
    before = {t.episode_id: t.started_at for t in read_trajectories(path)}
    assert 3 <= len(before) < 12, "the kill should land midway"
    assert not (out / "results.json").exists()

    # Without --resume the run refuses to mix results.
    refused = run_eval(*args)
    assert refused.returncode == 2 and "--resume" in refused.stdout

    resumed = run_eval(*args, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{len(before)} episode(s) kept" in resumed.stdout
    after = read_trajectories(path)
    ids = [t.episode_id for t in after]
    assert sorted(ids) == sorted(t["task_id"] for t in bundled_tasks()[:12])  # each exactly once
    assert {t.episode_id: t.started_at for t in after if t.episode_id in before} == before
    results = json.loads((out / "results.json").read_text())
    assert results["summary"]["episodes"] == 12 and results["summary"]["success_rate"] == 1.0


def test_resume_reruns_errored_episodes(tmp_path) -> None:
    """An episode that ended in a policy error is rerun; the rerun supersedes it."""
    script = write_script(tmp_path / "script.json", delay=0.0)
    data = json.loads(script.read_text())
    broken = dict(data, actions={k: v[:1] for k, v in data["actions"].items()})  # no answers
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    out = tmp_path / "run"
    first = run_eval("math", "--policy", f"scripted:{bad}", "--num", "3", "--out", str(out))
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads((out / "results.json").read_text())["summary"]["errored"] == 3
    second = run_eval(
        "math", "--policy", f"scripted:{script}", "--num", "3", "--out", str(out), "--resume"
    )
    assert second.returncode == 0
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert summary["errored"] == 0 and summary["success_rate"] == 1.0 and summary["episodes"] == 3
