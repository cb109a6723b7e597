"""The `python` and `terminal` envs: env checker, checked tasks, grading that cannot be forged."""

from __future__ import annotations

import json

import pytest

import skyrl_gym
from skyrl_gym.checker import run_checks
from skyrl_gym.envs.python.env import bundled_tasks as python_tasks
from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_gym.envs.terminal.env import bundled_tasks as terminal_tasks
from skyrl_sdk.sandboxes import create_sandbox
from skyrl_sdk.tools.python_exec import python_tool
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap


def bash(command: str) -> str:
    call = json.dumps({"name": "bash", "arguments": {"command": command}})
    return f"<tool_call>{call}</tool_call>"


DONE = '<tool_call>{"name": "answer", "arguments": {"answer": "done"}}</tool_call>'


@pytest.mark.parametrize("env_id", ["python", "terminal"])
def test_env_passes_the_checker(env_id: str) -> None:
    failures = [r for r in run_checks(lambda: skyrl_gym.make(env_id)) if not r.passed]
    assert failures == []


def test_python_tasks_answers_are_what_their_solutions_print() -> None:
    async def go():
        async with create_sandbox() as sb:
            py = python_tool(sb, timeout_s=30)
            return [
                (t["answer"], (await py.fn(code=t["solution"])).strip()) for t in python_tasks()
            ]

    pairs = arun(go(), timeout=120)
    assert len(pairs) >= 20
    assert all(expected == got for expected, got in pairs), pairs


def test_python_episode_rewards_the_right_answer_only() -> None:
    env = skyrl_gym.make("python")
    task = python_tasks()[7]  # gcd(1234567890, 9876543210)
    try:
        env.reset(options={"task": task})
        obs, reward, done, _, _ = env.step(
            "<python>import math\nmath.gcd(1234567890, 9876543210)</python>"
        )
        assert "90" in obs[0]["content"] and reward == 0.0 and not done
        _, reward, done, _, info = env.step("<answer>90</answer>")
        assert (reward, done, info["episode"]["correct"]) == (1.0, True, True)
        env.reset(options={"task": task})
        _, reward, done, _, _ = env.step("<answer>91</answer>")
        assert (reward, done) == (0.0, True)
    finally:
        env.close()


def test_every_terminal_task_fails_untouched_and_passes_with_its_solution() -> None:
    env = TerminalEnv()
    try:
        for task in terminal_tasks():
            env.reset(options={"task": task})
            _, untouched, *_ = env.step(DONE)
            env.reset(options={"task": task})
            obs, _, _, _, info = env.step(bash(task["solution"]))
            assert info["parse_error"] is None, obs
            _, solved, done, _, info = env.step(DONE)
            assert (untouched, solved, done) == (0.0, 1.0, True), (task["task_id"], info)
    finally:
        env.close()


def test_agent_cannot_forge_the_grading_phase() -> None:
    """The agent plants a passing grader script and leaves a process to keep overwriting the
    real one; grading in a fresh phase ignores both."""
    task = next(t for t in terminal_tasks() if t.get("check_files"))
    forge = (
        "mkdir -p /tmp/grader && echo \"print('ok')\" > /tmp/grader/test_fib.py; "
        "echo 'def fib(n): return 0' > fib.py; "
        "(while :; do [ -d /tmp/grader ] && echo \"print('ok')\" > /tmp/grader/test_fib.py; "
        "sleep 0.005; done) >/dev/null 2>&1 &"
    )
    env = TerminalEnv()
    try:
        env.reset(options={"task": task})
        env.step(bash(forge))
        _, reward, done, _, info = env.step(DONE)
        assert done and reward == 0.0
        assert "AssertionError" in info["episode"]["check"]["output"]
    finally:
        env.close()


def test_async_episode_and_idempotent_close() -> None:
    async def go():
        env = skyrl_gym.make("terminal")
        task = terminal_tasks()[0]
        await env.areset(options={"task": task})
        await env.astep(bash(task["solution"]))
        result = await env.astep(DONE)
        env.close()
        env.close()
        return result

    _, reward, done, _, _ = arun(go())
    assert (reward, done) == (1.0, True)
