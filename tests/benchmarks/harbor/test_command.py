"""`skyrl harbor run --agent command:CMD`'s agent phase plays through `Agent.play`: the
trial's started environment is the command agent's env (`TrialCommandEnv`), and how CMD
ended (timeout, exit code, a sandbox that failed) becomes the trial's agent outcome."""

from __future__ import annotations

import json

import pytest

from skyrl_sdk.agents.command_host import UNGRADED, host_env
from skyrl_sdk.agents.command_run import AgentRun
from skyrl_sdk.agents.trajectory import StopReason, Trajectory
from skyrl_sdk.benchmarks.harbor.agents import AgentFailure
from skyrl_sdk.benchmarks.harbor.command import TrialCommandEnv, command_outcome
from skyrl_sdk.sandboxes.spec import ExecResult
from tests.conftest import arun, needs_bwrap


def _trajectory(stop: StopReason, error: str | None = None) -> Trajectory:
    return Trajectory(
        episode_id="t",
        task_id="t",
        env_id="harbor",
        policy="p via command:x",
        stop_reason=stop,
        turns=(),
        segments=(),
        prompt_messages=(),
        reward=0.0,
        success=False,
        started_at=0.0,
        error=error,
    )


def _run(exit_code: int, *, timed_out: bool = False) -> AgentRun:
    return AgentRun(ExecResult(exit_code, "", "boom\n", timed_out=timed_out), 0)


@pytest.mark.parametrize(
    ("stop", "run", "failure", "keeps_trajectory"),
    [
        (StopReason.TIMEOUT, _run(-9, timed_out=True), AgentFailure.TIMEOUT, True),
        (StopReason.AGENT_ERROR, _run(3), AgentFailure.NONZERO_EXIT, True),
        (StopReason.AGENT_ERROR, _run(-9), AgentFailure.ERROR, True),  # killed by a signal
        (StopReason.AGENT_ERROR, _run(0), AgentFailure.ERROR, True),  # never called the model
        (StopReason.AGENT_ERROR, None, AgentFailure.ERROR, True),  # never started
        (StopReason.ENV_ERROR, None, AgentFailure.ERROR, False),  # the sandbox failed
        (StopReason.DONE, _run(0), None, True),
    ],
)
def test_how_cmd_ended_is_the_trials_agent_outcome(stop, run, failure, keeps_trajectory) -> None:
    trajectory = _trajectory(stop, None if stop is StopReason.DONE else "what went wrong")
    outcome = command_outcome(trajectory, run)
    assert outcome.failure is failure
    assert outcome.message == ("" if failure is None else "what went wrong")
    assert (outcome.trajectory is trajectory) is keeps_trajectory


class _Task:
    name = "find-file"
    instruction = "Find the file that holds the access code."


class _Runtime:
    """A started runtime's two parts the trial env reads (the task and its sandbox)."""

    task = _Task()
    sandbox = None


def test_the_trial_env_is_its_own_host_hands_over_the_instruction_and_grades_later() -> None:
    env = TrialCommandEnv(_Runtime(), 12.5)  # type: ignore[arg-type]
    assert host_env(env) is env and env.agent_timeout_s == 12.5
    messages, _ = arun(env.areset(options={"task": {"task_id": "find-file"}}))
    assert messages == [{"role": "user", "content": _Task.instruction}]
    run = _run(3)
    assert arun(env.grade(run)) is UNGRADED and env.run is run
    with pytest.raises(RuntimeError):
        arun(env.astep("anything"))


@needs_bwrap
@pytest.mark.parametrize(
    ("command", "error"),
    [("exit 3", "agent_nonzero_exit"), ("kill -9 $$", "agent_error")],
)
def test_a_failing_command_is_an_agent_error_and_still_graded(tmp_path, command, error) -> None:
    """A real trial: CMD fails in the task's environment; the trial records the agent's
    error kind, and the verifier still grades the untouched workspace (reward 0)."""
    from skyrl_gym.envs.harbor.env import BUNDLED_TASKS
    from skyrl_sdk.agents.command_agent import CommandAgent, CommandAgentRunner
    from skyrl_sdk.agents.policy_spec import load_policy
    from skyrl_sdk.benchmarks.harbor.agents import AgentKind
    from skyrl_sdk.benchmarks.harbor.records import JobConfig
    from skyrl_sdk.benchmarks.harbor.trial import run_trial

    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Done."]))
    policy = load_policy(f"scripted:{script}", tokenizer="tiny").policy
    config = JobConfig(
        path=BUNDLED_TASKS / "find-file", out=tmp_path, agent=f"command:{command}", policy="x"
    )
    assert config.agent is AgentKind.COMMAND and config.command == CommandAgent(command)
    with CommandAgentRunner(config.command, policy, log_dir=tmp_path / "logs") as runner:
        trials: list[Trajectory] = []
        result = arun(
            run_trial(
                BUNDLED_TASKS / "find-file",
                config,
                tmp_path,
                policy=runner,
                on_trajectory=trials.append,
            )
        )
    assert result.agent_error is not None and result.agent_error.value == error, result
    assert result.reward == 0.0 and result.stages["verifier"].status.value == "ok"
    (trajectory,) = trials
    assert trajectory.stop_reason is StopReason.AGENT_ERROR and trajectory.reward == 0.0
    (log,) = (tmp_path / "logs").iterdir()
    assert f"command: {command}" in log.read_text()
