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

The parts, a module each: the spec and its checks (`command_spec`: `CommandAgent`,
`parse_agent`), one run of CMD and the model server (`command_run`: `agent_environment`,
`run_in_sandbox`, `AgentRun`, `start_model_server`), and what the env offers the agent
(`command_host`: `CommandHost`, `host_env`, `Grade`). Every name of them is importable from
here too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.tasks import TaskRow
from skyrl_sdk.agents.agent import PlayableEnv
from skyrl_sdk.agents.command_host import (
    UNGRADED,
    CommandHost,
    Grade,
    ToolEnvHost,
    agent_phase,
    host_env,
)
from skyrl_sdk.agents.command_run import (
    AgentRun,
    SessionServer,
    agent_environment,
    agent_sandbox_spec,
    instruction_of,
    new_session_id,
    release_session,
    run_in_sandbox,
    server_port,
    start_model_server,
)
from skyrl_sdk.agents.command_spec import (
    AGENT_DIR,
    AGENT_HOME,
    DEFAULT_OUTPUT_LIMIT_BYTES,
    DEFAULT_TIMEOUT_S,
    INSTRUCTION_FILE,
    LOOP,
    MAX_INSTRUCTION_ENV_BYTES,
    PREFIX,
    CommandAgent,
    CommandAgentError,
    parse_agent,
)
from skyrl_sdk.agents.trajectory import StopReason, Trajectory, TrajectoryWriter
from skyrl_sdk.sandboxes.spec import ExecResult

if TYPE_CHECKING:
    from skyrl_sdk.agents.policy import Policy

__all__ = [
    "AGENT_DIR",
    "AGENT_HOME",
    "DEFAULT_OUTPUT_LIMIT_BYTES",
    "DEFAULT_TIMEOUT_S",
    "INSTRUCTION_FILE",
    "LOOP",
    "MAX_INSTRUCTION_ENV_BYTES",
    "PREFIX",
    "UNGRADED",
    "AgentRun",
    "CommandAgent",
    "CommandAgentError",
    "CommandAgentRunner",
    "CommandHost",
    "CommandRun",
    "EpisodeRecord",
    "Grade",
    "SessionServer",
    "ToolEnvHost",
    "agent_environment",
    "agent_phase",
    "agent_sandbox_spec",
    "host_env",
    "instruction_of",
    "new_session_id",
    "parse_agent",
    "release_session",
    "run_command_episodes",
    "run_in_sandbox",
    "server_port",
    "start_model_server",
]


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
        episode failures. Reset the env with the agent's phase settings (`host_env`), run
        CMD in its sandbox (`run_command`), then let the env grade the workspace (graded in
        every case, as Harbor does). The env is not closed here: whoever made it closes it."""
        task_id = str(task.get("task_id", ""))
        episode_id = episode_id or task_id
        base = EpisodeRecord(
            episode_id, task_id, env_id, self.name, time.time(), time.perf_counter()
        )
        try:
            host = host_env(env)
            server = await asyncio.to_thread(self.server)
            port = server_port(server)
        except Exception as e:
            return base.failed(StopReason.ENV_ERROR, f"{type(e).__name__}: {e}")
        try:
            with host.agent_phase(self.agent, port):
                messages, _ = await env.areset(options={"task": task})
        except Exception as e:
            return base.failed(StopReason.ENV_ERROR, f"reset: {type(e).__name__}: {e}")
        run = await self.run_command(host, server, episode_id, task_id, instruction_of(messages))
        grade = UNGRADED
        try:
            grade = await host.grade(run.run)
        except Exception as e:
            if not run.stop.is_error:
                run = replace(
                    run,
                    stop=StopReason.ENV_ERROR,
                    message=f"grading: {type(e).__name__}: {e}",
                )
        return base.finish(run.captured, run.stop, run.message, grade.reward, grade.success)

    async def run_command(
        self,
        host: CommandHost,
        server: SessionServer,
        episode_id: str,
        task_id: str,
        instruction: str,
    ) -> CommandRun:
        """Run CMD once in the host's sandbox under a session key of its own (revoked when it
        exits), capped by the host's timeout; its captured session and how it ended."""
        agent = self.agent
        if host.agent_timeout_s is not None:
            agent = replace(agent, timeout_s=min(agent.timeout_s, host.agent_timeout_s))
        session_id = new_session_id(episode_id)
        key = server.issue_session_key(session_id)
        variables = agent_environment(
            agent,
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
            sandbox = host.sandbox
            if sandbox is None:
                raise RuntimeError("the environment has no sandbox")
            result = await host.in_sandbox_loop(
                run_in_sandbox(sandbox, agent, instruction, variables)
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
        return CommandRun(run, captured, stop, message)

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
class CommandRun:
    """One run of CMD in an episode, as `CommandAgentRunner.run_command` saw it end."""

    run: AgentRun
    """The command's result (its exit code, or None when it never started) and model calls."""
    captured: Trajectory | None
    """The tokens its session captured (None: it made no request)."""
    stop: StopReason
    """The episode's stop reason so far (`AgentRun.stop`, or `env_error` when the sandbox
    failed under the agent)."""
    message: str | None
    """The stop's one-line message."""


@dataclass(frozen=True)
class EpisodeRecord:
    """What every trajectory of one command-agent episode shares; `finish` builds it."""

    episode_id: str
    """The trajectory's episode id."""
    task_id: str
    """The task row's `task_id`."""
    env_id: str
    """The env's registry id (`harbor` for a Harbor trial)."""
    policy: str
    """The runner's name: the model and the agent."""
    started_at: float
    """`time.time()` when the episode started."""
    t0: float
    """`time.perf_counter()` then (for `duration_s`)."""

    def failed(self, stop: StopReason, message: str) -> Trajectory:
        """The trajectory of an episode that ended before CMD ran (no turns, no reward)."""
        return self.finish(None, stop, message, 0.0, False)

    def finish(
        self,
        captured: Trajectory | None,
        stop: StopReason,
        message: str | None,
        reward: float,
        success: bool,
    ) -> Trajectory:
        """The episode's trajectory: the captured session's turns and segments, graded with
        `reward` (on the last turn too) and `success`."""
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
