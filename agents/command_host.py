"""Where a command agent plays: the `CommandHost` an env offers beside `PlayableEnv`.

A command agent (`skyrl_sdk.agents.command_agent.CommandAgentRunner`) resets its env like any
agent, then runs CMD in the sandbox the reset started and lets the env grade what CMD left.
`CommandHost` is what it needs of the env for that, and nothing else:

- `agent_phase(agent, port)`: while the env resets, its agent sandbox forwards the model
  server's `port`, binds the harness read-only and has the agent's caps;
- `sandbox`: the agent phase's sandbox once the env reset;
- `agent_timeout_s`: a cap on CMD's wall time (None: the agent's own limit);
- `in_sandbox_loop(run)`: runs a coroutine that uses the sandbox on the loop the sandbox
  lives on;
- `grade(run)`: end the episode and grade it, told how CMD ended (an `AgentRun`).

`host_env(env)` gives the host of an env: the env itself when it is one (a Harbor trial's
environment, `skyrl_sdk.benchmarks.harbor.command`), else a `ToolEnvHost` over the env's
sandboxed tool env (a `HarborEnv`, or a `SandboxToolEnv` whose episodes start from its
`sandbox_template`), which grades through the env's own `answer` call; any other env is a
`CommandAgentError` saying which envs can host one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Coroutine, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from skyrl_sdk.agents.agent import PlayableEnv
from skyrl_sdk.agents.command_run import AgentRun, agent_sandbox_spec
from skyrl_sdk.agents.command_spec import CommandAgent, CommandAgentError

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.env import HarborEnv
    from skyrl_gym.sandbox_env import SandboxToolEnv
    from skyrl_sdk.sandboxes.base import Sandbox

T = TypeVar("T")


@dataclass(frozen=True)
class Grade:
    """What grading a command agent's episode gave."""

    reward: float
    """The episode's reward (the last turn's too)."""
    success: bool
    """Whether the task was solved (the env's verdict, else reward > 0)."""


UNGRADED = Grade(0.0, False)
"""The grade of a host that grades later, outside the episode (a Harbor trial's verifier
phase runs after the agent phase, for every agent alike)."""


@runtime_checkable
class CommandHost(Protocol):
    """What a command agent needs of the env it plays (see the module docstring)."""

    @property
    def sandbox(self) -> Sandbox | None:
        """The agent phase's sandbox, once the env reset (None: it has none)."""
        ...

    @property
    def agent_timeout_s(self) -> float | None:
        """A cap on CMD's wall time in seconds (None: the agent's own `timeout_s`)."""
        ...

    def agent_phase(self, agent: CommandAgent, port: int) -> AbstractContextManager[None]:
        """Entered around the env's reset: its agent sandbox reaches `port`, binds the
        harness and has the agent's caps; its grading sandboxes never do."""
        ...

    async def in_sandbox_loop(self, run: Coroutine[Any, Any, T]) -> T:
        """Await `run` (it uses `sandbox`) on the event loop the sandbox lives on."""
        ...

    async def grade(self, run: AgentRun) -> Grade:
        """End the episode and grade the workspace; `run` is how CMD ended."""
        ...


def host_env(env: PlayableEnv) -> CommandHost:
    """The `CommandHost` of `env` (see the module docstring); a `CommandAgentError` when it
    cannot host a command agent."""
    from skyrl_gym.envs.harbor.env import HarborEnv
    from skyrl_gym.sandbox_env import SandboxToolEnv

    if isinstance(env, CommandHost):
        return env
    inner = getattr(env, "unwrapped", env)
    if isinstance(inner, HarborEnv) or (
        isinstance(inner, SandboxToolEnv) and type(inner)._reset is SandboxToolEnv._reset
    ):
        return ToolEnvHost(env, inner)
    raise CommandAgentError(
        f"env {type(inner).__name__} cannot host a command agent: it needs a sandboxed tool "
        "env (a Harbor env, or one whose episodes start from its sandbox_template, e.g. "
        "terminal)"
    )


@dataclass(frozen=True)
class ToolEnvHost:
    """The host of a sandboxed tool env played by a command agent in eval and train: its
    sandboxes live on the SDK's background loop, and it grades through its own `answer`
    call (the agent's sandbox is closed first, then the env's grader runs in a fresh phase)."""

    env: PlayableEnv
    """The env as the agent plays it (the wrappers `make` added)."""
    inner: HarborEnv | SandboxToolEnv
    """The sandboxed tool env inside it."""
    agent_timeout_s: float | None = None
    """No cap beyond the agent's own timeout."""

    @property
    def sandbox(self) -> Sandbox | None:
        """The episode's sandbox, which the env's reset started."""
        return self.inner.sandbox

    def agent_phase(self, agent: CommandAgent, port: int) -> AbstractContextManager[None]:
        """`agent_phase(inner, agent, port)`."""
        return agent_phase(self.inner, agent, port)

    async def in_sandbox_loop(self, run: Coroutine[Any, Any, T]) -> T:
        """`run` on the background loop the env's sandboxes are made on."""
        from skyrl_sdk.sandboxes import background_loop

        return await background_loop().arun(run)

    async def grade(self, run: AgentRun) -> Grade:
        """The env's `answer` step: its reward, and its verdict (`info["episode"]["correct"]`,
        else reward > 0). Raises when the env does not end the episode there."""
        from skyrl_sdk.tools import ToolCall

        call = self.inner.tool_format.render_call(ToolCall("answer", {"answer": "done"}))
        _, reward, terminated, _, info = await self.env.astep(call)
        if not terminated:
            raise RuntimeError("the env did not end the episode on `answer`")
        episode = info.get("episode") if isinstance(info, dict) else None
        success = (
            bool(episode["correct"])
            if isinstance(episode, dict) and "correct" in episode
            else reward > 0
        )
        return Grade(float(reward), success)


@contextlib.contextmanager
def agent_phase(
    inner: HarborEnv | SandboxToolEnv, agent: CommandAgent, port: int
) -> Iterator[None]:
    """While resetting `inner`, its agent sandbox gets the forwarded `port`, the harness's
    binds and the agent's caps; afterwards its grading sandboxes start from the env's own
    settings again (no port, no harness)."""
    from skyrl_gym.envs.harbor.env import HarborEnv

    if isinstance(inner, HarborEnv):
        from skyrl_sdk.agents.command_runtime import CommandRuntime

        base = inner.make_runtime
        # Keep the env's own grading settings (TerminalGenEnv's `require_exit_zero=True`).
        settings = dict(base.keywords) if isinstance(base, functools.partial) else {}
        inner.make_runtime = functools.partial(
            CommandRuntime,
            **{
                **settings,
                "agent_ports": (port,),
                "agent_binds": agent.sandbox_binds(),
                "agent_output_limit_bytes": agent.output_limit_bytes,
                "agent_memory_bytes": agent.memory_bytes,
            },
        )
        try:
            yield  # the runtime itself drops the port and binds for its verifier phase
        finally:
            inner.make_runtime = base
        return
    template = inner.sandbox_template
    inner.sandbox_template = agent_sandbox_spec(template, agent, port)
    try:
        yield
    finally:
        inner.sandbox_template = template
