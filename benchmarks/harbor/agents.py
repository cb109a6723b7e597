"""The agents a Harbor trial can run: `oracle`, `nop` and `llm` (our agent loop).

Each agent acts only through the trial's sandbox during the agent phase and reports an
`AgentOutcome`; grading is the runner's job.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skyrl_gym.envs.harbor.runtime import AGENT_LOGS, NO_LIMIT_S, SOLUTION, HarborRuntime

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.env import HarborEnv
    from skyrl_sdk.agents.policy import Policy, SamplingParams
    from skyrl_sdk.agents.trajectory import Trajectory


class AgentKind(enum.StrEnum):
    """Which agent plays the trial."""

    ORACLE = "oracle"
    """Runs the task's solution/solve.sh (should score 1.0)."""
    NOP = "nop"
    """Does nothing (the task's baseline; should score 0.0)."""
    LLM = "llm"
    """A policy in our agent loop with bash / view_file / edit_file tools."""
    COMMAND = "command"
    """An external agent program (`--agent command:CMD`) against the policy, served over
    OpenAI's API (`benchmarks.harbor.command`)."""


class AgentFailure(enum.StrEnum):
    """How an agent phase went wrong (the trial is still graded, as in Harbor)."""

    TIMEOUT = "agent_timeout"
    """The agent ran past `[agent].timeout_sec` and was stopped."""
    NONZERO_EXIT = "agent_nonzero_exit"
    """The agent's command (solve.sh) exited with a non-zero status."""
    ERROR = "agent_error"
    """The agent failed (no solution to run, policy error, env error)."""


@dataclass(frozen=True)
class AgentOutcome:
    """What an agent phase gave."""

    failure: AgentFailure | None = None
    """What went wrong, or None."""
    message: str = ""
    """Details of the failure."""
    trajectory: Trajectory | None = None
    """The episode (llm agent only)."""


async def run_oracle(runtime: HarborRuntime, timeout_s: float | None) -> AgentOutcome:
    """Run /solution/solve.sh in the environment, logging to /logs/agent/oracle.txt."""
    if not runtime.solution_uploaded or runtime.sandbox is None:
        return AgentOutcome(AgentFailure.ERROR, "the task has no solution/solve.sh")
    env = {"DEBIAN_FRONTEND": "noninteractive", **runtime.task.solution_env}
    assert runtime.task.solution_dir is not None
    run = runtime.script_command(runtime.task.solution_dir / "solve.sh", f"{SOLUTION}/solve.sh")
    script = (
        f"chmod +x {SOLUTION}/solve.sh 2>/dev/null; "
        f"{run} > {AGENT_LOGS}/oracle.txt 2>&1; code=$?; "
        f"[ $code -eq 0 ] || echo $code > {AGENT_LOGS}/exit-code.txt; exit $code"
    )
    result = await runtime.sandbox.exec(
        [runtime.shell, "-c", script], timeout=timeout_s or NO_LIMIT_S, env=env
    )
    if result.timed_out:
        return AgentOutcome(AgentFailure.TIMEOUT, f"solve.sh ran past {timeout_s:g}s")
    if not result.ok:
        return AgentOutcome(AgentFailure.NONZERO_EXIT, f"solve.sh exited with {result.exit_code}")
    return AgentOutcome()


async def run_llm(
    env: HarborEnv,
    policy: Policy,
    row: dict,
    *,
    timeout_s: float | None,
    max_turns: int,
    max_tokens: int,
    sampling: SamplingParams | None = None,
) -> AgentOutcome:
    """Play the task with `policy` in our agent loop, the loop agent (`LoopAgent`: the env's
    reset starts the environment)."""
    from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits
    from skyrl_sdk.agents.trajectory import StopReason

    limits = RolloutLimits(max_turns=max_turns, max_tokens=max_tokens, timeout=timeout_s)
    trajectory = await LoopAgent(policy, limits, sampling).play(env, row, env_id="harbor")
    stop = trajectory.stop_reason
    if stop is StopReason.TIMEOUT:
        return AgentOutcome(AgentFailure.TIMEOUT, trajectory.error or "", trajectory)
    if stop.is_error:
        return AgentOutcome(AgentFailure.ERROR, trajectory.error or stop.value, trajectory)
    return AgentOutcome(trajectory=trajectory)
