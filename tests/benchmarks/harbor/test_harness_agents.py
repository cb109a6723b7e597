"""Codex CLI (0.171.0) and Claude Code (2.1.332) as `skyrl harbor run --agent command:...`.

Each runs from its npm prefix under `.venvs/` (bound read-only) through its wrapper in
`examples/harnesses/`, inside the trial's bwrap sandbox, on the bundled `find-file` task,
against a scripted policy: the first reply is the harness's own shell tool call (as
non-canonical token ids) that solves the task and probes the network, the second its final
text. Checked: reward 1, one main segment of exactly the scripted ids, the harness's final
text in its log, and that the only route out of the sandbox was the server's port (a
listener on another host loopback port is never reached, nor is an outside address).
Skips, saying how to build it, when a harness's npm prefix is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.env import BUNDLED_TASKS
from skyrl_sdk.agents.trajectory import SegmentStart, StopReason, read_trajectories
from skyrl_sdk.benchmarks import harness_venv
from tests.conftest import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="forwarded ports (pasta) need root"),
]

SKYRL = Path(sys.executable).with_name("skyrl")
WRAPPERS = Path(__file__).parents[3] / "examples" / "harnesses"
SOLVE = "grep -rl '^ACCESS-CODE:' /app/docs | head -n 1 > /app/answer.txt"
FINAL = "Done: /app/answer.txt names the file."
PROBE = (
    'python3 -c \'import socket as s; s.setdefaulttimeout(3); print("probe", '
    '*(s.socket().connect_ex(a) for a in [("127.0.0.1", {port}), ("1.1.1.1", 443)]))\''
)
"""Run by the solving tool call: a connect to the test's listener on another host loopback
port and one to an outside address; it prints their errnos (0 would mean one got through)."""
PROBED = re.compile(r"probe (\d+) (\d+)")


@pytest.fixture(scope="module")
def renderer():
    from skyrl_sdk.agents.evaluate import load_renderer

    return load_renderer("tiny")


@pytest.fixture(scope="module")
def wrappers() -> Iterator[Path]:
    """The wrapper scripts in a directory the sandbox's user (uid 65534) can read, whatever
    the checkout's own permissions."""
    d = Path(tempfile.mkdtemp(prefix="skyrl-wrappers-"))
    d.chmod(0o755)
    for script in WRAPPERS.glob("*.sh"):
        shutil.copy(script, d / script.name)
        (d / script.name).chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def canary() -> Iterator[tuple[int, list[str]]]:
    """A listener on a host loopback port that is not forwarded, and who connected to it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            seen.append(str(peer))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # from the host it is reachable: a blocked probe means the sandbox blocked it
    for _ in range(50):
        if seen:
            break
        stop.wait(0.1)
    assert seen, "the canary listener did not see the host's own connection"
    seen.clear()
    yield port, seen
    stop.set()
    thread.join(5)
    server.close()


def non_canonical(renderer, text: str) -> list[int]:
    """`text` as ids the tokenizer would never produce itself: one piece per character."""
    ids = [i for ch in text for i in renderer.encode(ch)]
    assert ids != list(renderer.encode(text)) and renderer.decode(ids) == text
    return ids


def tool_call(name: str, **arguments: str) -> str:
    """A scripted tool-call reply in the tiny template's Hermes/Qwen format."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def npm_harness(name: str) -> tuple[Path, Path]:
    """The harness's npm prefix (`.venvs/npm-NAME`) and CLI, or a skip saying how to build it."""
    cli = harness_venv.npm_ready(name)
    if cli is None:
        pytest.skip(
            f"{harness_venv.npm_dir(name)} is missing or not at today's pin: build it with "
            f"`python -m skyrl_sdk.benchmarks.harness_venv {name}`"
        )
    return harness_venv.npm_dir(name), cli


def run_harness(
    tmp_path: Path, renderer, wrapper: Path, harness: tuple[Path, Path], call: str
) -> tuple[list, Path]:
    """`skyrl harbor run` on find-file with `wrapper` over the harness's CLI; the
    script is [`call` as non-canonical ids, FINAL]. Returns the script and the job folder."""
    script = [non_canonical(renderer, call), FINAL]
    (tmp_path / "script.json").write_text(json.dumps(script))
    prefix, cli = harness
    out = subprocess.run(
        [
            *(str(SKYRL), "harbor", "run", "--path", str(BUNDLED_TASKS / "find-file")),
            *("-o", "job", "--policy", "scripted:script.json"),
            *("--agent", f"command:sh {wrapper} {cli}"),
            *("--agent-bind", str(wrapper.parent), "--agent-bind", str(prefix)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return script, tmp_path / "job"


def check_trial(job: Path, renderer, script: list, canary_seen: list[str]) -> str:
    """Reward 1, one main segment of exactly the scripted ids (in the capture file too), the
    probe blocked both ways; returns the agent's log."""
    data = json.loads((job / "job.json").read_text())
    (log_file,) = (job / "agent_logs").iterdir()
    log = log_file.read_text()
    assert data["agent"] == "command" and data["mean_reward"] == 1.0, (data, log[-3000:])
    (t,) = read_trajectories(job / "trajectories.jsonl")
    assert t.stop_reason is StopReason.DONE and t.reward == 1.0, t.error
    assert [s.start for s in t.segments] == [SegmentStart.EPISODE]
    expected = [
        [*(a if isinstance(a, list) else renderer.encode(a)), renderer.end_of_turn_id]
        for a in script
    ]
    assert [list(turn.token_ids) for turn in t.turns] == expected
    (sample,) = t.training_samples()
    assert sum(sample.loss_mask) == sum(len(ids) for ids in expected)
    (capture,) = (job / "capture").glob("*.jsonl")
    (captured,) = read_trajectories(capture)
    assert [list(turn.token_ids) for turn in captured.turns] == expected
    # The tool's output came back to the harness: the probe reached neither the other host
    # port nor the outside (an errno each, never 0), and the listener saw no connection.
    observation = renderer.decode(list(t.turns[0].observation_ids))
    found = PROBED.search(observation)
    assert found is not None, observation[-2000:]
    assert int(found[1]) != 0 and int(found[2]) != 0, found[0]
    assert canary_seen == []
    return log


def stdout_of(log: str) -> str:
    """The command's stdout as its agent log keeps it."""
    return log.split("--- stdout ---\n", 1)[1].split("--- stderr ---", 1)[0]


def test_codex_exec_solves_a_bundled_task_in_the_sandbox(
    tmp_path, renderer, wrappers, canary
) -> None:
    """Codex CLI through `codex.sh`: its `exec_command` tool solves find-file, it prints the
    final text; the Responses API session is one segment of exactly the scripted ids."""
    prefix, launcher = npm_harness("codex")
    native = prefix / "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl"
    # The launcher is a Node script; the sandbox sees only the host's system Node, if any.
    has_node = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin") is not None
    harness = (prefix, launcher if has_node else native / "bin" / "codex")
    port, seen = canary
    call = tool_call("exec_command", cmd=f"{SOLVE}; {PROBE.format(port=port)}")
    script, job = run_harness(tmp_path, renderer, wrappers / "codex.sh", harness, call)
    log = check_trial(job, renderer, script, seen)
    assert stdout_of(log).strip() == FINAL  # `codex exec` prints only the final message


def test_claude_code_solves_a_bundled_task_in_the_sandbox(
    tmp_path, renderer, wrappers, canary
) -> None:
    """Claude Code through `claude_code.sh` (OpenAI's variables mapped to Anthropic's): its
    Bash tool solves find-file, its JSON result is the final text; the Messages API session
    is one segment of exactly the scripted ids (no side requests with traffic off)."""
    harness = npm_harness("claude-code")
    port, seen = canary
    command = f"{SOLVE}; {PROBE.format(port=port)}"
    call = tool_call("Bash", command=command, description="Find the file")
    script, job = run_harness(tmp_path, renderer, wrappers / "claude_code.sh", harness, call)
    log = check_trial(job, renderer, script, seen)
    result = json.loads(stdout_of(log))
    assert result["result"] == FINAL and not result["is_error"], result
    assert result["num_turns"] == 2
