"""`skyrl harbor run --agent command:CMD`: an external agent program as a Harbor trial's agent.

The trial's environment starts with the model server's port forwarded into it and the
harness's directories bound read-only (`agents.command_runtime.CommandRuntime`; the verifier
phase gets neither).
CMD runs there with the session URL, a session-only key and the task's instruction: the
command agent plays the trial's environment as an env like any other (`runner.play` on a
`TrialCommandEnv`, the env and `CommandHost` of a started runtime); when CMD exits the key is
revoked, the task's own verifier grades as for any agent, and the captured tokens are the
trial's trajectory.

A multi-step task runs CMD once per step (`StepsCommandRuntime`, `step_player`): each step's
sandbox gets the port again and CMD the step's instruction; each step's captured tokens are
a trajectory of their own (`<task>/<step>`), graded with that step's reward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from skyrl_gym.core import StepReturn
from skyrl_sdk.agents.command_agent import CommandAgentRunner
from skyrl_sdk.agents.command_host import UNGRADED, Grade
from skyrl_sdk.agents.command_run import AgentRun, server_port
from skyrl_sdk.agents.command_runtime import CommandRuntime
from skyrl_sdk.agents.trajectory import StopReason, Trajectory
from skyrl_sdk.benchmarks.harbor.agents import AgentFailure, AgentOutcome
from skyrl_sdk.tools.messages import Message

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime
    from skyrl_gym.envs.harbor.task import TaskStep
    from skyrl_sdk.agents.command_spec import CommandAgent
    from skyrl_sdk.sandboxes import Sandbox

T = TypeVar("T")


class StepsCommandRuntime(CommandRuntime):
    """A `CommandRuntime` for a multi-step task: CMD runs once per step, so every step's
    agent sandbox forwards the model server's port again (a `CommandRuntime` drops it for
    good once its agent phase ends); each step's verifier sandbox still has none."""

    async def begin_step(self, step: TaskStep, *, with_solution: bool = False) -> Sandbox:
        if self.base_task is not None:  # a later step: the previous agent phase ends first
            await self.end_agent_phase()
            self._agent_over = False
        return await super().begin_step(step, with_solution=with_solution)


def command_runtime(
    runner: CommandAgentRunner, task: Any, *, multi_step: bool = False, **kwargs: Any
) -> CommandRuntime:
    """The trial's runtime for `runner`'s agent (starts the model server if needed);
    `multi_step`: one whose every step's agent phase reaches the server."""
    port = server_port(runner.server())
    kind = StepsCommandRuntime if multi_step else CommandRuntime
    return kind(
        task,
        agent_ports=(port,),
        agent_binds=runner.agent.sandbox_binds(),
        agent_output_limit_bytes=runner.agent.output_limit_bytes,
        agent_memory_bytes=runner.agent.memory_bytes,
        **kwargs,
    )


@dataclass
class TrialCommandEnv:
    """A trial's started environment as the command agent's env: a `PlayableEnv` and its
    `CommandHost` (`skyrl_sdk.agents.command_host`).

    The trial starts the environment (its `start` stage) and grades it afterwards (its
    `verifier` stage, as for every agent), so the reset only hands CMD the task's (or the
    open step's) instruction, and the grade records how CMD ended (`run`) and grades
    nothing (`UNGRADED`): the trial puts the verifier's reward on the trajectory (`graded`).
    """

    runtime: CommandRuntime
    """The trial's environment, started (a multi-step task: with the step open)."""
    agent_timeout_s: float | None
    """The agent phase's limit (the task's, scaled): a cap on CMD's own timeout."""
    run: AgentRun | None = None
    """How CMD ended (its exit code), once it ran."""

    async def areset(
        self, *, seed: int | None = None, options: Mapping[str, object] | None = None
    ) -> tuple[list[Message], dict[str, object]]:
        """The instruction as the episode's one message; the environment is already up."""
        return [{"role": "user", "content": self.runtime.task.instruction}], {}

    async def astep(self, action: str) -> StepReturn:
        """Never called: a command agent acts in the sandbox, and the trial grades."""
        raise RuntimeError("a Harbor trial's command agent acts in its sandbox, not by steps")

    def close(self) -> None:
        """Nothing: the trial stops its environment itself."""

    @property
    def sandbox(self) -> Sandbox | None:
        """The agent phase's sandbox."""
        return self.runtime.sandbox

    def agent_phase(self, agent: CommandAgent, port: int) -> AbstractContextManager[None]:
        """Nothing to set: the runtime was built for the agent (`command_runtime`)."""
        return contextlib.nullcontext()

    async def in_sandbox_loop(self, run: Coroutine[Any, Any, T]) -> T:
        """The trial's sandboxes live on the trial's own event loop."""
        return await run

    async def grade(self, run: AgentRun) -> Grade:
        """Record how CMD ended; the trial's verifier grades afterwards."""
        self.run = run
        return UNGRADED


async def run_command(
    runtime: CommandRuntime, runner: CommandAgentRunner, timeout_s: float | None
) -> AgentOutcome:
    """Play the command agent (`runner.play`) in the started runtime's sandbox, CMD capped
    at `timeout_s`; the trajectory (captured tokens, reward still 0: the job grades
    afterwards) is in the outcome."""
    env = TrialCommandEnv(runtime, timeout_s)
    task_name = runtime.task.name
    trajectory = await runner.play(env, {"task_id": task_name}, env_id="harbor")
    return command_outcome(trajectory, env.run)


def command_outcome(trajectory: Trajectory, run: AgentRun | None) -> AgentOutcome:
    """The agent phase's outcome from the command agent's episode: a timeout, a non-zero
    exit (from `run`'s exit code), another failure of CMD (all with the trajectory), or a
    sandbox or server that failed under it (no trajectory)."""
    stop, message = trajectory.stop_reason, trajectory.error or ""
    if stop is StopReason.TIMEOUT:
        return AgentOutcome(AgentFailure.TIMEOUT, message, trajectory)
    if stop is StopReason.AGENT_ERROR:
        result = run.result if run is not None else None
        exited = result is not None and result.exit_code > 0
        return AgentOutcome(
            AgentFailure.NONZERO_EXIT if exited else AgentFailure.ERROR, message, trajectory
        )
    if stop.is_error:
        return AgentOutcome(AgentFailure.ERROR, message)
    return AgentOutcome(trajectory=trajectory)


def step_player(
    runner: CommandAgentRunner,
) -> Callable[[HarborRuntime, float | None], Awaitable[AgentOutcome]]:
    """One step of a multi-step trial: CMD in the step's sandbox, told the step's
    instruction, under the step's timeout (a session of its own per step)."""

    async def play(runtime: HarborRuntime, timeout_s: float | None) -> AgentOutcome:
        assert isinstance(runtime, CommandRuntime)
        return await run_command(runtime, runner, timeout_s)

    return play


def graded(trajectory: Trajectory, reward: float | None) -> Trajectory:
    """The trajectory with the verifier's reward (on its last turn too)."""
    value = float(reward or 0.0)
    turns = list(trajectory.turns)
    if turns:
        turns[-1] = replace(turns[-1], reward=value)
    return replace(trajectory, turns=tuple(turns), reward=value, success=value > 0)
