"""Command agents (`--agent command:CMD`): CMD runs inside the episode's real bwrap sandbox,
reaches the model server only through the forwarded port, with a session-only key; the env's
own grader gives the reward; failures are episodes with a stop reason.

The model server here is a small real HTTP server (`SessionStandIn`) that implements the
`SessionServer` protocol: it checks each session's bearer key and counts calls. The tests with
the real `agents.serving` server and token-exact capture are in `test_command_agent_serving.py`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from skyrl_sdk.agents.command_agent import (
    AGENT_HOME,
    INSTRUCTION_FILE,
    CommandAgent,
    CommandAgentError,
    CommandAgentRunner,
    agent_sandbox_spec,
    parse_agent,
    run_command_episodes,
)
from skyrl_sdk.agents.policy import FinishReason
from skyrl_sdk.agents.trajectory import Segment, StopReason, Trajectory, Turn
from skyrl_sdk.sandboxes import SandboxSpec
from tests.conftest import arun, needs_bwrap, tcp_listener

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="forwarded ports (pasta) need root"),
]

HELLO = {"task_id": "hello", "instruction": "Write hello world to hello.txt", "files": {}}
HELLO["check"] = 'test "$(cat hello.txt)" = "hello world"'


class SessionStandIn:
    """A real HTTP server on 127.0.0.1 with per-session keys (the `SessionServer` protocol)."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.calls: dict[str, int] = {}
        self.refused: list[tuple[str, int]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                parts = self.path.strip("/").split("/")
                session = parts[1] if len(parts) > 2 and parts[0] == "sessions" else ""
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if not session or stand_in.keys.get(session) != key:
                    stand_in.refused.append((session, 401))
                    self._reply(401, {"error": {"message": "bad key"}})
                    return
                stand_in.calls[session] = stand_in.calls.get(session, 0) + 1
                self._reply(200, {"choices": [{"message": {"content": "ok"}}]})

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def session_url(self, session_id: str) -> str:
        return self.base_url.removesuffix("/v1") + f"/sessions/{session_id}/v1"

    def issue_session_key(self, session_id: str) -> str:
        key = self.keys[session_id] = secrets.token_urlsafe(16)
        return key

    def revoke_session_key(self, session_id: str) -> None:
        self.keys.pop(session_id, None)

    def session_trajectory(self, session_id: str) -> Trajectory | None:
        n = self.calls.get(session_id, 0)
        if not n:
            return None
        turns = tuple(
            Turn(i, 0, "ok", (5, 6), (0.0, 0.0), (0, 0), FinishReason.STOP, (), (), 0.0)
            for i in range(n)
        )
        return Trajectory(
            session_id,
            "",
            "",
            "stand-in",
            StopReason.DONE,
            turns,
            (Segment((1, 2), (), 0),),
            (),
            0.0,
            False,
        )

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Policy:
    name = "stand-in-model"
    renderer = None


@pytest.fixture
def stand_in():
    server = SessionStandIn()
    yield server
    server.stop()


@pytest.fixture
def harness_dir() -> Iterator[Path]:
    """A host directory with the agent scripts, readable by the sandbox's user (pytest's
    tmp_path is not: its parents are private to root)."""
    d = Path(tempfile.mkdtemp(prefix="skyrl-harness-"))
    d.chmod(0o755)
    (d / "call_model.py").write_text(
        "import json, os, sys, urllib.request\n"
        "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions',\n"
        "    data=json.dumps({'model': os.environ['OPENAI_MODEL'], 'messages': [\n"
        "        {'role': 'user', 'content': os.environ['SKYRL_INSTRUCTION']}]}).encode(),\n"
        "    headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'],\n"
        "             'Content-Type': 'application/json'})\n"
        "print(urllib.request.urlopen(req, timeout=10).read().decode())\n"
    )
    (d / "call_model.py").chmod(0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _terminal_env():
    import skyrl_gym

    return skyrl_gym.make("terminal", tasks=[HELLO])


def _play(runner: CommandAgentRunner, task: dict = HELLO) -> Trajectory:
    env = _terminal_env()
    try:
        return arun(runner.run(env, task, episode_id=task["task_id"], env_id="terminal"), 120)
    finally:
        env.close()


def _runner(stand_in, tmp_path: Path, command: str, **kwargs) -> CommandAgentRunner:
    return CommandAgentRunner(
        CommandAgent(command, **kwargs),
        _Policy(),  # type: ignore[arg-type]
        log_dir=tmp_path / "logs",
        server_factory=lambda policy, capture, name: stand_in,
    )


def _log(tmp_path: Path) -> str:
    (log,) = (tmp_path / "logs").iterdir()
    return log.read_text()


def test_agent_solves_task_and_grader_rewards_it(stand_in, harness_dir, tmp_path) -> None:
    """CMD calls the model through the forwarded port with its session key, reads the
    instruction from the file and the variable, writes the answer; the env's grader gives 1.0."""
    command = (
        f"python3 {harness_dir}/call_model.py && "
        f'test "$(cat $SKYRL_INSTRUCTION_FILE)" = "$SKYRL_INSTRUCTION" && '
        f'test "$HOME" = {AGENT_HOME} && test "$(pwd)" = /workspace && '
        "echo 'hello world' > hello.txt"
    )
    t = _play(_runner(stand_in, tmp_path, command, binds=(str(harness_dir),)))
    assert t.stop_reason is StopReason.DONE, t.error
    assert t.reward == 1.0 and t.success
    assert len(t.turns) == 1 and t.turns[-1].reward == 1.0
    assert t.policy == "stand-in-model via command:" + command
    assert sum(stand_in.calls.values()) == 1 and not stand_in.refused
    assert not stand_in.keys  # the session key was revoked when CMD exited
    assert INSTRUCTION_FILE.startswith("/tmp/")  # never in the graded workspace


def test_unsolved_task_scores_zero(stand_in, harness_dir, tmp_path) -> None:
    t = _play(
        _runner(
            stand_in, tmp_path, f"python3 {harness_dir}/call_model.py", binds=(str(harness_dir),)
        )
    )
    assert t.stop_reason is StopReason.DONE and t.reward == 0.0 and not t.success


def test_host_canary_is_not_readable(stand_in, harness_dir, tmp_path) -> None:
    """The host's files (a canary under /root, the checkout, the project's venv) do not
    exist inside the agent's sandbox."""
    canary = Path.home() / f"skyrl-canary-{secrets.token_hex(4)}"
    canary.write_text("CANARY-SECRET")
    checkout = Path(__file__).resolve().parents[2]
    try:
        command = (
            f"python3 {harness_dir}/call_model.py; "
            f"cat {canary}; cat {checkout}/pyproject.toml; "
            f"ls {checkout}/.venv; grep -r CANARY-SECRET /root /home /work 2>&1 | head -3; exit 0"
        )
        t = _play(_runner(stand_in, tmp_path, command, binds=(str(harness_dir),)))
        log = _log(tmp_path)
    finally:
        canary.unlink()
    assert t.stop_reason is StopReason.DONE, t.error
    assert "CANARY-SECRET" not in log.replace("grep -r CANARY-SECRET", "")
    assert "No such file or directory" in log
    assert "[project]" not in log


def test_only_the_forwarded_port_reaches_the_host(stand_in, harness_dir, tmp_path) -> None:
    """Another host service on 127.0.0.1 and the host's own addresses are unreachable from
    CMD; the model server's port is."""
    from skyrl_sdk.sandboxes.network import host_addresses

    with tcp_listener("127.0.0.1", b"HTTP/1.0 200 OK\r\n\r\nSECRET-SERVICE") as other:
        addresses = [(str(a), other) for a in host_addresses() if a.version == 4]
        targets = [("127.0.0.1", other), *addresses[:2]]
        probe = harness_dir / "probe.py"
        probe.write_text(
            "import json, socket, sys\n"
            "out = {}\n"
            "for host, port in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        s = socket.create_connection((host, port), timeout=3)\n"
            "        out[host] = s.recv(100).decode(errors='replace')\n"
            "    except OSError as e:\n"
            "        out[host] = 'refused: ' + type(e).__name__\n"
            "print('PROBE', json.dumps(out))\n"
        )
        probe.chmod(0o644)
        command = f"python3 {harness_dir}/call_model.py && python3 {probe} '{json.dumps(targets)}'"
        t = _play(_runner(stand_in, tmp_path, command, binds=(str(harness_dir),)))
    log = _log(tmp_path)
    assert t.stop_reason is StopReason.DONE, (t.error, log)
    line = next(x for x in log.splitlines() if x.startswith("PROBE "))
    results = json.loads(line.removeprefix("PROBE "))
    assert results and all(v.startswith("refused") for v in results.values()), results
    assert sum(stand_in.calls.values()) == 1  # the forwarded port worked


@pytest.mark.parametrize(
    ("command", "reason", "message"),
    [
        ("/nonexistent/agent --go", StopReason.AGENT_ERROR, "not found"),
        ("/etc/passwd", StopReason.AGENT_ERROR, "not executable"),
        ("echo boom >&2; exit 3", StopReason.AGENT_ERROR, "exited with 3: boom"),
        ("kill -9 $$", StopReason.AGENT_ERROR, "killed by signal 9"),
        ("true", StopReason.AGENT_ERROR, "never called the model"),
        ("sleep 30", StopReason.TIMEOUT, "ran past"),
    ],
)
def test_failures_are_episodes(stand_in, tmp_path, command, reason, message) -> None:
    """A missing, non-executable, crashing, killed, silent or hanging agent ends its episode
    with a stop reason and a message; the workspace is still graded; nothing raises."""
    t = _play(_runner(stand_in, tmp_path, command, timeout_s=2.0))
    assert t.stop_reason is reason, t.error
    assert message in (t.error or ""), t.error
    assert t.reward == 0.0 and not t.turns and not t.trainable


def test_run_command_episodes_keeps_going(stand_in, harness_dir, tmp_path) -> None:
    """Several episodes, one of them crashing, all come back in order and are written."""
    from skyrl_sdk.agents.trajectory import TrajectoryWriter, read_trajectories

    tasks = [dict(HELLO, task_id=f"t{i}") for i in range(3)]
    command = (
        f'[ "$SKYRL_TASK_ID" = t1 ] && exit 5; python3 {harness_dir}/call_model.py; '
        "echo 'hello world' > hello.txt"
    )
    runner = _runner(stand_in, tmp_path, command, binds=(str(harness_dir),))

    def make_env():
        import skyrl_gym

        return skyrl_gym.make("terminal", tasks=tasks)

    with TrajectoryWriter(tmp_path / "t.jsonl") as writer:
        out = arun(
            run_command_episodes(
                runner, make_env, [(t["task_id"], t) for t in tasks], concurrency=2, writer=writer
            ),
            180,
        )
    assert [t.episode_id for t in out] == ["t0", "t1", "t2"]
    assert [t.stop_reason for t in out] == [
        StopReason.DONE,
        StopReason.AGENT_ERROR,
        StopReason.DONE,
    ]
    assert [t.reward for t in out] == [1.0, 0.0, 1.0]
    assert len(read_trajectories(tmp_path / "t.jsonl")) == 3


def test_grading_sandbox_has_no_route_to_the_server(stand_in, harness_dir, tmp_path) -> None:
    """The env's grader runs without the forwarded port: a check that connects to the model
    server's port passes only when that fails (and the agent's own sandbox did reach it)."""
    port = int(stand_in.base_url.rsplit(":", 1)[1].split("/")[0])
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
    task = dict(HELLO, check=f'! python3 -c "{probe}"')
    runner = _runner(stand_in, tmp_path, f"python3 {harness_dir}/call_model.py")
    runner.agent = CommandAgent(runner.agent.command, binds=(str(harness_dir),))
    t = _play(runner, task)
    assert t.stop_reason is StopReason.DONE, t.error
    assert sum(stand_in.calls.values()) == 1 and t.reward == 1.0


def test_env_without_template_sandbox_is_an_env_error(stand_in, tmp_path) -> None:
    import skyrl_gym

    env = skyrl_gym.make("math")
    runner = _runner(stand_in, tmp_path, "true")
    t = arun(runner.run(env, {"task_id": "m", "question": "1+1", "answer": "2"}))
    env.close()
    assert t.stop_reason is StopReason.ENV_ERROR
    assert "cannot host a command agent" in (t.error or "")


def test_spec_parsing_and_validation(tmp_path) -> None:
    assert parse_agent(None) is None and parse_agent("loop") is None
    agent = parse_agent("command:python agent.py --x", timeout_s=5)
    assert agent is not None and agent.command == "python agent.py --x" and agent.timeout_s == 5
    for bad, match in [
        ("agentx", "must be 'loop' or 'command:CMD'"),
        ("command:", "empty"),
        ("command:  ", "empty"),
    ]:
        with pytest.raises(CommandAgentError, match=match):
            parse_agent(bad)
    with pytest.raises(CommandAgentError, match="only apply to"):
        parse_agent("loop", venv=str(tmp_path))
    with pytest.raises(CommandAgentError, match="not a virtualenv"):
        CommandAgent("x", venv=str(tmp_path))
    with pytest.raises(CommandAgentError, match="not a directory"):
        CommandAgent("x", binds=(str(tmp_path / "missing"),))
    if os.geteuid() == 0:
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        with pytest.raises(CommandAgentError, match="not readable by the sandbox's user"):
            CommandAgent("x", binds=(str(private),))
    with pytest.raises(CommandAgentError, match="the SDK's own virtualenv"):
        CommandAgent("x", venv=sys.prefix)
    with pytest.raises(CommandAgentError, match="timeout"):
        CommandAgent("x", timeout_s=float("nan"))


def test_agent_spec_binds_venv_and_its_base_interpreter(harness_dir) -> None:
    tmp_path = harness_dir
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    base = tmp_path / "py" / "3.11"
    (base / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\nversion = 3.11\n")
    agent = CommandAgent("x", venv=str(venv), binds=(str(tmp_path),))
    assert agent.sandbox_binds() == (str(venv), str(base), str(tmp_path))
    (venv / "pyvenv.cfg").write_text("home = /nonexistent/py/bin\n")
    with pytest.raises(CommandAgentError, match="sandbox cannot use"):
        CommandAgent("x", venv=str(venv))
    if os.geteuid() == 0 and not Path("/root").stat().st_mode & 0o001:
        (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.base_prefix)}/bin\n")
        if str(Path(sys.base_prefix).resolve()).startswith("/root/"):
            with pytest.raises(CommandAgentError, match="make the venv from /usr/bin/python3"):
                CommandAgent("x", venv=str(venv))
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert CommandAgent("x", venv=str(venv)).sandbox_binds() == (str(venv),)
    spec = agent_sandbox_spec(SandboxSpec(forward_ports=(9,)), agent, 8123)
    assert spec.forward_ports == (9, 8123) and str(venv) in spec.ro_binds
