"""External agents as commands: `--agent "command:CMD"` in eval, train and `harbor run`.

Most agents people want to train already exist as programs that talk to an OpenAI-compatible
endpoint. A `CommandAgent` runs such a program as the agent of an episode:

    reset the env                  -> the episode's sandbox starts, with the model server's
                                      port forwarded into it (the only route out)
    mint a session key             -> valid for this episode's session URL only
    run CMD inside that sandbox    -> OPENAI_BASE_URL = the session URL, OPENAI_API_KEY = the
                                      key, the instruction in a file and an env var; caps on
                                      (wall time, output, the sandbox's memory/pids/CPU)
    revoke the key; grade          -> the env's own grader (a fresh phase the agent never saw)
    the captured tokens            -> the episode's trajectory (what the trainer consumes)

CMD is a shell command line run with `/bin/sh -c` in the sandbox's workspace, as the sandbox's
user: every command it executes is confined like any agent's. A harness's own virtualenv is
bound read-only at its own path (`CommandAgent.venv`; its `bin/` leads PATH, and the base
interpreter it points to is bound too when it lies outside the sandbox's system directories);
other host directories it needs (its scripts, its config) are bound read-only by name
(`CommandAgent.binds`). Nothing else of the host is visible.

What CMD gets (environment variables):

- `OPENAI_BASE_URL` (and `OPENAI_API_BASE`): `http://127.0.0.1:PORT/sessions/<id>/v1`, the
  model server's session URL, reached through the forwarded port;
- `OPENAI_API_KEY`: a key valid for that session only, revoked when CMD exits;
- `OPENAI_MODEL`, `SKYRL_MODEL`: the served model's name;
- `SKYRL_INSTRUCTION`: the task's instruction (the env's opening user message; left unset
  when longer than 64 KiB), and `SKYRL_INSTRUCTION_FILE`: a file holding it (always);
- `SKYRL_TASK_ID`, `SKYRL_SESSION_ID`; `HOME` is a fresh directory in the sandbox's `/tmp`,
  not the workspace, so a harness's config and caches never reach the grader.

Failures are episodes, never crashes of the run: a timeout is `StopReason.TIMEOUT`, a command
that is missing, not executable, crashes (non-zero exit, killed) or never calls the model is
`StopReason.AGENT_ERROR` with a one-line message (its output's tail is in the agent log).
The workspace is graded in every case, as Harbor does.

`CommandAgentRunner` is an `Agent` (`skyrl_sdk.agents.agent`): `play(env, task)` is one
episode, and `skyrl_sdk.agents.rollout.run_episodes` plays many with it, as with the loop agent.

Which envs can host one: Harbor envs (`harbor`, `terminal-gen`: their runtime is a
`CommandRuntime`) and sandboxed tool envs whose per-episode sandbox is built from their
`sandbox_template` (`terminal`), in `skyrl eval` and `skyrl train`; Harbor task folders
through `skyrl harbor run --agent command:CMD`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import re
import secrets
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

from skyrl_gym.tasks import TaskRow
from skyrl_sdk.agents.agent import PlayableEnv
from skyrl_sdk.agents.trajectory import StopReason, Trajectory, TrajectoryWriter
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH, ExecResult, SandboxSpec

if TYPE_CHECKING:
    from skyrl_sdk.agents.policy import Policy
    from skyrl_sdk.sandboxes.base import Sandbox

PREFIX = "command:"
"""How an agent spec names a command agent (`--agent "command:CMD"`)."""
LOOP = "loop"
"""The agent spec of our own agent loop (the default)."""
AGENT_DIR = "/tmp/skyrl-agent"
"""Directory in the sandbox's private `/tmp` with the instruction file and the agent's HOME."""
INSTRUCTION_FILE = f"{AGENT_DIR}/instruction.md"
"""Where the task's instruction is written inside the sandbox."""
AGENT_HOME = f"{AGENT_DIR}/home"
"""The agent command's HOME inside the sandbox (not the graded workspace)."""
MAX_INSTRUCTION_ENV_BYTES = 64 << 10
"""Longer instructions are only in the file (Linux caps one variable at 128 KiB)."""
DEFAULT_TIMEOUT_S = 600.0
"""Default wall-clock limit of one run of CMD."""
DEFAULT_OUTPUT_LIMIT_BYTES = 256 << 10
"""Default bytes of CMD's stdout and of its stderr kept (head and tail, marked when cut)."""
_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")
_SESSION_ID = re.compile(r"[^A-Za-z0-9_.-]+")
_NOT_FOUND, _NOT_EXECUTABLE = 127, 126


class CommandAgentError(ValueError):
    """An agent spec or a command agent's settings are invalid (one line, names the field)."""


# -- the spec -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandAgent:
    """An external agent program run as each episode's agent, inside its sandbox."""

    command: str
    """Shell command line (`/bin/sh -c`), run in the sandbox's workspace."""
    venv: str | None = None
    """Host virtualenv of the harness, bound read-only at its own path; its `bin/` leads PATH.
    Never the project's own venv: its packages and the checkout it points to would be readable."""
    binds: tuple[str, ...] = ()
    """More host directories bound read-only at their own paths (the harness's scripts)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Wall-clock limit of CMD; its process group is killed after it (the episode: `timeout`)."""
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES
    """Bytes kept of CMD's stdout and of its stderr (first three quarters and last quarter)."""
    memory_bytes: int | None = None
    """Memory cap of the agent's sandbox (None: the env's own; a Python harness may need more)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables of CMD (a dict is accepted)."""

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise CommandAgentError("the agent command is empty: use --agent 'command:CMD'")
        if "\0" in self.command:
            raise CommandAgentError("the agent command contains a NUL byte")
        if self.venv is not None:
            venv = os.path.abspath(os.fspath(self.venv))
            if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
                raise CommandAgentError(
                    f"agent venv {self.venv!r} is not a virtualenv (no pyvenv.cfg); create it "
                    "with `python -m venv DIR` and install the harness there"
                )
            if os.path.realpath(venv) == os.path.realpath(sys.prefix):
                raise CommandAgentError(
                    f"agent venv {self.venv!r} is the SDK's own virtualenv: its packages and "
                    "the checkout it points to would be readable by the agent; give the "
                    "harness a venv of its own"
                )
            object.__setattr__(self, "venv", venv)
        binds = (self.binds,) if isinstance(self.binds, str) else tuple(self.binds)
        resolved = []
        for path in binds:
            path = os.path.abspath(os.fspath(path))
            if not os.path.isdir(path) or path == "/":
                raise CommandAgentError(f"agent bind {path!r} is not a directory other than /")
            resolved.append(path)
        object.__setattr__(self, "binds", tuple(resolved))
        for path in (*([self.venv] if self.venv else []), *resolved):
            problem = _unreachable(path)
            if problem:
                raise CommandAgentError(problem)
        prefix = _base_prefix(self.venv) if self.venv else None
        if prefix is not None and not _under_system(prefix):
            problem = _unreachable(prefix) if os.path.isdir(prefix) else f"{prefix} is missing"
            if problem:
                raise CommandAgentError(
                    f"agent venv {self.venv!r} runs the interpreter under {prefix}, which the "
                    f"sandbox cannot use ({problem}); make the venv from /usr/bin/python3 "
                    "(`python -m skyrl_sdk.benchmarks.harness_venv` does)"
                )
        if (
            isinstance(self.timeout_s, bool)
            or not isinstance(self.timeout_s, int | float)
            or not math.isfinite(self.timeout_s)
            or self.timeout_s <= 0
        ):
            raise CommandAgentError(
                f"agent timeout must be a positive number of seconds, got {self.timeout_s!r}"
            )
        if not isinstance(self.output_limit_bytes, int) or self.output_limit_bytes < 64:
            raise CommandAgentError(
                f"agent output limit must be an int >= 64, got {self.output_limit_bytes!r}"
            )
        items = self.env.items() if isinstance(self.env, Mapping) else self.env
        object.__setattr__(self, "env", tuple(sorted((str(k), str(v)) for k, v in items)))

    @property
    def spec(self) -> str:
        """The agent spec string (`command:CMD`)."""
        return PREFIX + self.command

    def sandbox_binds(self) -> tuple[str, ...]:
        """Host directories to bind read-only: the venv, the base interpreter's prefix when
        it lies outside the sandbox's system directories (a pyenv or /opt Python), `binds`."""
        out: list[str] = []
        if self.venv is not None:
            out.append(self.venv)
            prefix = _base_prefix(self.venv)
            if prefix is not None and not _under_system(prefix):
                out.append(prefix)
        out.extend(self.binds)
        return tuple(dict.fromkeys(out))


def _base_prefix(venv: str) -> str | None:
    """The prefix of the interpreter a venv was made from (pyvenv.cfg's `home` is its bin/)."""
    with contextlib.suppress(OSError):
        for line in Path(venv, "pyvenv.cfg").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "home":
                home = os.path.realpath(value.strip())
                return os.path.dirname(home) if os.path.basename(home) == "bin" else home
    return None


def _unreachable(path: str) -> str | None:
    """Why the sandbox's user cannot read `path`, or None. As root, bwrap runs commands as
    uid 65534, which needs search permission on every ancestor and read on the directory."""
    if os.geteuid() != 0:
        return None
    current = Path(path)
    for part in (current, *current.parents):
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH or (part == current and not mode & stat.S_IROTH):
            return (
                f"agent bind {path!r} is not readable by the sandbox's user (uid 65534): "
                f"{part} has mode {stat.filemode(mode)}; chmod o+rx it (o+x on its parents)"
            )
    return None


def _under_system(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d + "/") for d in _SYSTEM_DIRS)


def parse_agent(
    spec: str | None,
    *,
    venv: str | None = None,
    binds: Sequence[str] = (),
    timeout_s: float | None = None,
    memory_bytes: int | None = None,
) -> CommandAgent | None:
    """`None` for our agent loop (`loop` or nothing), a `CommandAgent` for `command:CMD`.

    The other arguments configure a command agent; given with the loop they are an error
    (they would be silently unused).
    """
    if spec is None or spec.strip() == LOOP:
        extras = {
            "--agent-venv": venv,
            "--agent-bind": list(binds) or None,
            "--agent-memory-mb": memory_bytes,
        }
        given = [name for name, value in extras.items() if value]
        if given:
            raise CommandAgentError(f"{', '.join(given)} only apply to --agent 'command:CMD'")
        return None
    if not spec.startswith(PREFIX):
        raise CommandAgentError(f"--agent must be 'loop' or 'command:CMD', got {spec!r}")
    return CommandAgent(
        spec.removeprefix(PREFIX),
        venv=venv,
        binds=tuple(binds),
        timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
        memory_bytes=memory_bytes,
    )


# -- the model server (C1's `start_server`) --------------------------------------------------


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


# -- one run of CMD -------------------------------------------------------------------------


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


# -- episodes in sandboxed tool envs (eval, train) -------------------------------------------


def host_env(env: PlayableEnv) -> Any:
    """The env's inner env when it can host a command agent: a `HarborEnv` (its runtime is
    built by `make_runtime`) or a `SandboxToolEnv` whose episodes start from its
    `sandbox_template`; else a `CommandAgentError` saying which envs can."""
    from skyrl_gym.envs.harbor.env import HarborEnv
    from skyrl_gym.sandbox_env import SandboxToolEnv

    inner = getattr(env, "unwrapped", env)
    if isinstance(inner, HarborEnv):
        return inner
    if isinstance(inner, SandboxToolEnv) and type(inner)._reset is SandboxToolEnv._reset:
        return inner
    raise CommandAgentError(
        f"env {type(inner).__name__} cannot host a command agent: it needs a sandboxed tool "
        "env (a Harbor env, or one whose episodes start from its sandbox_template, e.g. "
        "terminal)"
    )


@contextlib.contextmanager
def agent_phase(inner: Any, agent: CommandAgent, port: int) -> Iterator[None]:
    """While resetting `inner` (from `host_env`), its agent sandbox gets the forwarded
    `port`, the harness's binds and the agent's caps; afterwards its grading sandboxes start
    from the env's own settings again (no port, no harness)."""
    from skyrl_gym.envs.harbor.env import HarborEnv

    if isinstance(inner, HarborEnv):
        from skyrl_sdk.agents.command_runtime import CommandRuntime

        inner.make_runtime = functools.partial(
            CommandRuntime,
            agent_ports=(port,),
            agent_binds=agent.sandbox_binds(),
            agent_output_limit_bytes=agent.output_limit_bytes,
            agent_memory_bytes=agent.memory_bytes,
        )
        yield  # the runtime itself drops the port and binds for its verifier phase
        return
    template = inner.sandbox_template
    inner.sandbox_template = agent_sandbox_spec(template, agent, port)
    try:
        yield
    finally:
        inner.sandbox_template = template


@dataclass
class CommandAgentRunner:
    """Plays episodes with a `CommandAgent` against one model server over `policy`.

    The server (`agents.serving.start_server`, capture on) starts on first use and is shared
    by every episode; `close()` stops it. Each episode gets its own session and key.
    """

    agent: CommandAgent
    """The external agent."""
    policy: Policy
    """What the model server samples from (it needs a renderer: exact token ids)."""
    capture_dir: Path | None = None
    """Where the server writes captured sessions (None: a temporary directory)."""
    log_dir: Path | None = None
    """Where each episode's agent log (exit status, stdout, stderr) is written (None: not kept)."""
    model_name: str | None = None
    """The model name the server reports (default: the policy's name)."""
    server_factory: Callable[[Policy, Path | None, str], SessionServer] = start_model_server
    """Starts the server (tests may pass one that starts another real server)."""
    _server: SessionServer | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _tmp: Any = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        """Recorded as each trajectory's `policy`: the model and the agent."""
        return f"{self.policy.name} via {self.agent.spec}"

    @property
    def served_model(self) -> str:
        return self.model_name or self.policy.name

    @classmethod
    def for_training(
        cls, settings: Any, policy: Policy, run_dir: Path
    ) -> CommandAgentRunner | None:
        """The runner a training config's `agent` section asks for (None: our agent loop).
        Captured sessions go to `<run_dir>/capture`, agent logs to `<run_dir>/agent_logs`."""
        agent = parse_agent(
            settings.spec,
            venv=settings.venv,
            binds=tuple(settings.binds),
            timeout_s=settings.timeout_s,
            memory_bytes=settings.memory_mb << 20 if settings.memory_mb else None,
        )
        if agent is None:
            return None
        return cls(agent, policy, capture_dir=run_dir / "capture", log_dir=run_dir / "agent_logs")

    def server(self) -> SessionServer:
        """The model server, started on first use."""
        with self._lock:
            if self._server is None:
                capture = self.capture_dir
                if capture is None:
                    import tempfile

                    self._tmp = tempfile.TemporaryDirectory(prefix="skyrl-capture-")
                    capture = Path(self._tmp.name)
                capture.mkdir(parents=True, exist_ok=True)
                self._server = self.server_factory(self.policy, capture, self.served_model)
            return self._server

    def close(self) -> None:
        """Stop the server (idempotent)."""
        with self._lock:
            server, self._server = self._server, None
            if server is not None:
                server.stop()
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    def __enter__(self) -> CommandAgentRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def play(
        self,
        env: PlayableEnv,
        task: TaskRow,
        *,
        episode_id: str | None = None,
        env_id: str = "",
    ) -> Trajectory:
        """Play one episode of `env` on `task` (the `Agent` protocol); never raises for
        episode failures. The env is not closed here: whoever made it closes it."""
        from skyrl_sdk.sandboxes import background_loop
        from skyrl_sdk.tools import ToolCall

        task_id = str(task.get("task_id", ""))
        episode_id = episode_id or task_id
        session_id = new_session_id(episode_id)
        started_at, t0 = time.time(), time.perf_counter()
        base = EpisodeRecord(episode_id, task_id, env_id, self.name, started_at, t0)
        try:
            inner = host_env(env)
            server = await asyncio.to_thread(self.server)
            port = server_port(server)
        except Exception as e:
            return base.failed(StopReason.ENV_ERROR, f"{type(e).__name__}: {e}")
        try:
            with agent_phase(inner, self.agent, port):
                messages, _ = await env.areset(options={"task": task})
        except Exception as e:
            return base.failed(StopReason.ENV_ERROR, f"reset: {type(e).__name__}: {e}")
        sandbox = inner.sandbox
        instruction = instruction_of(messages)
        key = server.issue_session_key(session_id)
        variables = agent_environment(
            self.agent,
            base_url=server.session_url(session_id),
            api_key=key,
            model=self.served_model,
            instruction=instruction,
            task_id=task_id,
            session_id=session_id,
        )
        result: ExecResult | None = None
        start_error: str | None = None
        try:
            result = await background_loop().arun(
                run_in_sandbox(sandbox, self.agent, instruction, variables)
            )
        except Exception as e:  # the sandbox died under the agent
            start_error = f"{type(e).__name__}: {e}"
        finally:
            server.revoke_session_key(session_id)
        captured = server.session_trajectory(session_id)
        release_session(server, session_id)
        run = AgentRun(result, len(captured.turns) if captured is not None else 0)
        stop, message = run.stop
        if start_error is not None:
            stop, message = StopReason.ENV_ERROR, f"agent sandbox: {start_error}"
        self.write_log(session_id, episode_id, result, stop, message)
        # Grade: the env's own `answer` path (the agent's sandbox is closed first, then the
        # env's grader runs in a fresh phase).
        reward, success = 0.0, False
        try:
            call = inner.tool_format.render_call(ToolCall("answer", {"answer": "done"}))
            _, reward, terminated, _, info = await env.astep(call)
            if not terminated:
                raise RuntimeError("the env did not end the episode on `answer`")
            episode = info.get("episode") if isinstance(info, dict) else None
            success = (
                bool(episode["correct"])
                if isinstance(episode, dict) and "correct" in episode
                else reward > 0
            )
        except Exception as e:
            if not stop.is_error:
                stop, message = StopReason.ENV_ERROR, f"grading: {type(e).__name__}: {e}"
        return base.finish(captured, stop, message, float(reward), success)

    run = play
    """The old name of `play` (kept: `runner.run(env, task, ...)` works as before)."""

    def write_log(
        self,
        session_id: str,
        episode_id: str,
        result: ExecResult | None,
        stop: StopReason,
        message: str | None,
    ) -> None:
        if self.log_dir is None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"episode: {episode_id}",
            f"session: {session_id}",
            f"command: {self.agent.command}",
            f"stop: {stop.value}" + (f" ({message})" if message else ""),
        ]
        if result is not None:
            lines += [
                f"exit_code: {result.exit_code}",
                f"timed_out: {result.timed_out}",
                f"duration_s: {result.duration_s:.3f}",
                f"truncated: {result.truncated}",
                "--- stdout ---",
                result.stdout,
                "--- stderr ---",
                result.stderr,
            ]
        (self.log_dir / f"{session_id}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class EpisodeRecord:
    """What every trajectory of one command-agent episode shares; `finish` builds it."""

    episode_id: str
    task_id: str
    env_id: str
    policy: str
    started_at: float
    t0: float

    def failed(self, stop: StopReason, message: str) -> Trajectory:
        return self.finish(None, stop, message, 0.0, False)

    def finish(
        self,
        captured: Trajectory | None,
        stop: StopReason,
        message: str | None,
        reward: float,
        success: bool,
    ) -> Trajectory:
        turns = list(captured.turns) if captured is not None else []
        if turns:  # the grader's reward belongs to the last turn (turn rewards sum to it)
            turns[-1] = replace(turns[-1], reward=reward)
        return Trajectory(
            episode_id=self.episode_id,
            task_id=self.task_id,
            env_id=self.env_id,
            policy=self.policy,
            stop_reason=stop,
            turns=tuple(turns),
            segments=captured.segments if captured is not None else (),
            prompt_messages=captured.prompt_messages if captured is not None else (),
            reward=reward,
            success=success,
            started_at=self.started_at,
            duration_s=time.perf_counter() - self.t0,
            error=message,
        )


async def run_command_episodes(
    runner: CommandAgentRunner,
    make_env: Callable[[], PlayableEnv],
    episodes: Sequence[tuple[str, TaskRow]],
    *,
    concurrency: int = 8,
    env_id: str = "",
    writer: TrajectoryWriter | None = None,
    on_done: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """`run_episodes(make_env, runner, episodes, ...)`: the command agent is an `Agent`, so
    the one runner of many episodes plays it (kept for callers of this older name)."""
    from skyrl_sdk.agents.rollout import run_episodes

    return await run_episodes(
        make_env,
        runner,
        episodes,
        concurrency=concurrency,
        env_id=env_id,
        writer=writer,
        on_done=on_done,
    )
