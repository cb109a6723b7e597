"""Stage budgets of a `terminal` episode (issue 28, part 4): the agent's limit (the rollout's
timeout) and the check's (`check_timeout_s`) end an episode with distinct stop reasons, in
real bwrap sandboxes."""

from __future__ import annotations

import json

import skyrl_gym
from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import StopReason
from tests.conftest import arun, needs_bwrap

ANSWER = '<tool_call>{"name": "answer", "arguments": {"answer": "done"}}</tool_call>'


def _bash(command: str) -> str:
    return (
        f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"
    )


def _play(task: dict, actions: list[str], *, timeout: float | None, check_timeout_s: float):
    env = skyrl_gym.make("terminal", tasks=[task], check_timeout_s=check_timeout_s)
    policy = ScriptedPolicy({task["task_id"]: actions})
    try:
        limits = RolloutLimits(max_turns=4, max_tokens=64, timeout=timeout)
        return arun(LoopAgent(policy, limits).play(env, task, env_id="terminal"), 120), env
    finally:
        env.close()


TASK = {
    "task_id": "stage-budgets",
    "instruction": "Create done.txt containing ok.",
    "files": {},
    "check": 'test "$(cat done.txt)" = ok',
}


@needs_bwrap
def test_a_check_past_its_timeout_is_a_verifier_timeout() -> None:
    hangs = {**TASK, "check": 'sleep 60; test "$(cat done.txt)" = ok'}
    trajectory, env = _play(
        hangs, [_bash("echo ok > done.txt"), ANSWER], timeout=None, check_timeout_s=2
    )
    assert trajectory.stop_reason is StopReason.DONE and trajectory.reward == 0.0
    info = env.unwrapped.episode_info()
    assert info["stage_stop"] == "verifier_timeout" and info["check"]["timed_out"]


@needs_bwrap
def test_an_agent_past_its_timeout_is_the_rollouts_timeout_and_no_verifier_timeout() -> None:
    trajectory, env = _play(TASK, [_bash("sleep 60"), ANSWER], timeout=3, check_timeout_s=60)
    assert trajectory.stop_reason is StopReason.TIMEOUT
    assert "stage_stop" not in env.unwrapped.episode_info()


@needs_bwrap
def test_a_check_in_time_has_no_stage_stop() -> None:
    trajectory, env = _play(
        TASK, [_bash("echo ok > done.txt"), ANSWER], timeout=30, check_timeout_s=60
    )
    assert trajectory.reward == 1.0 and "stage_stop" not in env.unwrapped.episode_info()
