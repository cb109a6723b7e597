"""One run of a command agent's CMD: the model server it talks to, its environment and its end.

- `SessionServer` (what a runner needs of the model server), `start_model_server` (the
  in-process OpenAI-compatible server over a policy, reachable only with session keys) and
  `release_session`;
- `agent_environment` (CMD's variables), `run_in_sandbox` (write the instruction and HOME,
  run CMD under its caps), `agent_sandbox_spec` (the agent phase's sandbox: the forwarded
  port, the harness's binds, the caps);
- `AgentRun`: how a run ended, as the episode's stop reason and a one-line message.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from skyrl_sdk.agents.command_spec import (
    AGENT_HOME,
    INSTRUCTION_FILE,
    MAX_INSTRUCTION_ENV_BYTES,
    CommandAgent,
    CommandAgentError,
)
from skyrl_sdk.agents.trajectory import StopReason, Trajectory
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH, ExecResult, SandboxSpec

if TYPE_CHECKING:
    from skyrl_sdk.agents.policy import Policy
    from skyrl_sdk.sandboxes.base import Sandbox

_SESSION_ID = re.compile(r"[^A-Za-z0-9_.-]+")
_NOT_FOUND, _NOT_EXECUTABLE = 127, 126


class SessionServer(Protocol):
    """What the runner needs of the model server (`agents.serving.RunningServer`)."""

    base_url: str
    """`http://127.0.0.1:PORT/v1`."""

    def session_url(self, session_id: str) -> str: ...
    def issue_session_key(self, session_id: str) -> str: ...
    def revoke_session_key(self, session_id: str) -> None: ...
    def session_trajectory(self, session_id: str) -> Trajectory | None: ...
    def stop(self) -> None: ...


def start_model_server(policy: Policy, capture_dir: Path | None, model_name: str) -> SessionServer:
    """The in-process OpenAI-compatible server over `policy`, on a free loopback port.

    Its main API key is a random secret kept in this process, so a session key (handed to one
    episode's agent) is the only way in: not the base URL, not another session's URL.
    """
    from skyrl_sdk.agents.serving import ServeConfig, start_server

    config = ServeConfig(
        host="127.0.0.1",
        port=0,
        api_key=secrets.token_urlsafe(32),
        capture_dir=capture_dir,
        model_name=model_name,
    )
    return start_server(policy, config)


def release_session(server: SessionServer, session_id: str) -> None:
    """Forget a finished episode's session in the server's memory (its capture file stays).

    A training run plays many thousands of episodes through one server, which otherwise keeps
    every session's token history and refuses new sessions past its limit. `agents.serving`
    has no public call for this yet: a server's `end_session(id)` is used when it has one,
    else the session is dropped from `RunningServer.store` directly.
    """
    end = getattr(server, "end_session", None)
    if callable(end):
        end(session_id)
        return
    store = getattr(server, "store", None)
    sessions, lock = getattr(store, "_sessions", None), getattr(store, "_lock", None)
    if isinstance(sessions, dict) and lock is not None:
        with lock:
            sessions.pop(session_id, None)


@dataclass(frozen=True)
class AgentRun:
    """How one run of CMD ended."""

    result: ExecResult | None
    """The command's result (None when it never started)."""
    model_calls: int
    """Captured assistant turns of its session."""

    @property
    def stop(self) -> tuple[StopReason, str | None]:
        """The episode's stop reason and message, from how CMD ended."""
        r = self.result
        if r is None:
            return StopReason.AGENT_ERROR, "the agent command did not start"
        detail = _last_line(r.stderr) or _last_line(r.stdout)
        tail = f": {detail}" if detail else ""
        if r.timed_out:
            return StopReason.TIMEOUT, f"the agent command ran past {r.duration_s:.0f} s{tail}"
        if r.exit_code == _NOT_FOUND:
            return StopReason.AGENT_ERROR, f"agent command not found (exit 127){tail}"
        if r.exit_code == _NOT_EXECUTABLE:
            return StopReason.AGENT_ERROR, f"agent command not executable (exit 126){tail}"
        if r.oom_killed:
            return StopReason.AGENT_ERROR, f"the agent command hit the memory cap{tail}"
        if r.exit_code < 0:
            return StopReason.AGENT_ERROR, f"the agent command was killed by signal {-r.exit_code}"
        if r.exit_code != 0:
            return StopReason.AGENT_ERROR, f"the agent command exited with {r.exit_code}{tail}"
        if self.model_calls == 0:
            return StopReason.AGENT_ERROR, (
                "the agent command never called the model (no request of its session was answered)"
            )
        return StopReason.DONE, None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def agent_environment(
    agent: CommandAgent,
    *,
    base_url: str,
    api_key: str,
    model: str,
    instruction: str,
    task_id: str,
    session_id: str,
) -> dict[str, str]:
    """The environment variables CMD runs with (see the module docstring)."""
    path = DEFAULT_PATH if agent.venv is None else f"{agent.venv}/bin:{DEFAULT_PATH}"
    env = {
        "PATH": path,
        "HOME": AGENT_HOME,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_BASE": base_url,
        "OPENAI_API_KEY": api_key,
        "OPENAI_MODEL": model,
        "SKYRL_MODEL": model,
        "SKYRL_INSTRUCTION_FILE": INSTRUCTION_FILE,
        "SKYRL_TASK_ID": task_id,
        "SKYRL_SESSION_ID": session_id,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if agent.venv is not None:
        env["VIRTUAL_ENV"] = agent.venv
    if len(instruction.encode("utf-8", "replace")) <= MAX_INSTRUCTION_ENV_BYTES:
        env["SKYRL_INSTRUCTION"] = instruction
    env.update(agent.env)
    return env


async def run_in_sandbox(
    sandbox: Sandbox, agent: CommandAgent, instruction: str, env: Mapping[str, str]
) -> ExecResult:
    """Write the instruction file and the agent's HOME, then run CMD and wait for it."""
    await sandbox.write_file(INSTRUCTION_FILE, instruction)
    await sandbox.write_file(f"{AGENT_HOME}/.keep", "")
    return await sandbox.exec(["/bin/sh", "-c", agent.command], timeout=agent.timeout_s, env=env)


def instruction_of(messages: Sequence[Mapping[str, Any]]) -> str:
    """The task's instruction: the last user message of the env's opening messages (the
    system message describes our own tool-call format, which an external harness does not use)."""
    users = [m for m in messages if m.get("role") == "user"]
    chosen = users[-1] if users else (messages[-1] if messages else {"content": ""})
    content = chosen.get("content", "")
    return content if isinstance(content, str) else str(content)


def new_session_id(episode_id: str) -> str:
    """A URL-safe session id, unique per episode run."""
    stem = _SESSION_ID.sub("-", episode_id).strip("-.")[:48] or "episode"
    return f"{stem}-{secrets.token_hex(6)}"


def agent_sandbox_spec(template: SandboxSpec, agent: CommandAgent, port: int) -> SandboxSpec:
    """The agent phase's sandbox: the env's own spec plus the forwarded model-server port,
    the harness's read-only binds and the agent's output (and memory) caps."""
    return replace(
        template,
        forward_ports=tuple(dict.fromkeys((*template.forward_ports, port))),
        ro_binds=tuple(dict.fromkeys((*template.ro_binds, *agent.sandbox_binds()))),
        output_limit_bytes=agent.output_limit_bytes,
        memory_bytes=agent.memory_bytes or template.memory_bytes,
    )


def server_port(server: SessionServer) -> int:
    """The TCP port of the server's base URL."""
    port = urlparse(server.base_url).port
    if port is None:
        raise CommandAgentError(f"the model server's URL {server.base_url!r} names no port")
    return port
