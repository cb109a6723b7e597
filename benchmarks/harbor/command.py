"""`skyrl harbor run --agent command:CMD`: an external agent program as a Harbor trial's agent.

The trial's environment starts with the model server's port forwarded into it and the
harness's directories bound read-only (`agents.command_runtime.CommandRuntime`; the verifier
phase gets neither).
CMD runs there with the session URL, a session-only key and the task's instruction
(`skyrl_sdk.agents.command_agent`); when it exits the key is revoked, the task's own verifier
grades as for any agent, and the captured tokens are the trial's trajectory.

A multi-step task runs CMD once per step (`StepsCommandRuntime`, `step_player`): each step's
sandbox gets the port again and CMD the step's instruction; each step's captured tokens are
a trajectory of their own (`<task>/<step>`), graded with that step's reward.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.command_agent import (
    AgentRun,
    CommandAgentRunner,
    EpisodeRecord,
    agent_environment,
    new_session_id,
    release_session,
    run_in_sandbox,
    server_port,
)
from skyrl_sdk.agents.command_runtime import CommandRuntime
from skyrl_sdk.agents.trajectory import StopReason, Trajectory
from skyrl_sdk.benchmarks.harbor.agents import AgentFailure, AgentOutcome

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime
    from skyrl_gym.envs.harbor.task import TaskStep
    from skyrl_sdk.sandboxes import Sandbox


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


async def run_command(
    runtime: CommandRuntime, runner: CommandAgentRunner, timeout_s: float | None
) -> AgentOutcome:
    """Run the command agent in the started runtime's sandbox; the trajectory (captured
    tokens, reward still 0: the job grades afterwards) is in the outcome."""
    server = runner.server()
    agent = runner.agent
    if timeout_s is not None:
        agent = replace(agent, timeout_s=min(agent.timeout_s, timeout_s))
    task_name = runtime.task.name
    session_id = new_session_id(task_name)
    base = EpisodeRecord(
        task_name, task_name, "harbor", runner.name, time.time(), time.perf_counter()
    )
    if runtime.sandbox is None:
        return AgentOutcome(AgentFailure.ERROR, "the environment has no sandbox")
    instruction = runtime.task.instruction
    key = server.issue_session_key(session_id)
    env = agent_environment(
        agent,
        base_url=server.session_url(session_id),
        api_key=key,
        model=runner.served_model,
        instruction=instruction,
        task_id=task_name,
        session_id=session_id,
    )
    result = None
    try:
        result = await run_in_sandbox(runtime.sandbox, agent, instruction, env)
    except Exception as e:
        return AgentOutcome(AgentFailure.ERROR, f"{type(e).__name__}: {e}")
    finally:
        server.revoke_session_key(session_id)
    captured = server.session_trajectory(session_id)
    release_session(server, session_id)
    run = AgentRun(result, len(captured.turns) if captured is not None else 0)
    stop, message = run.stop
    runner.write_log(session_id, task_name, result, stop, message)
    trajectory = base.finish(captured, stop, message, 0.0, False)
    if stop is StopReason.TIMEOUT:
        return AgentOutcome(AgentFailure.TIMEOUT, message or "", trajectory)
    if stop is StopReason.AGENT_ERROR:
        kind = AgentFailure.NONZERO_EXIT if result and result.exit_code > 0 else AgentFailure.ERROR
        return AgentOutcome(kind, message or "", trajectory)
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
