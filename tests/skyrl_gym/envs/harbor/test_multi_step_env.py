"""`make("harbor")` on a multi-step task: reset gives step 1's instruction; `answer` ends a
step, which is verified; past its min_reward the observation is the next step's instruction
and the episode goes on; the last turn's reward is the steps' roll-up
(`multi_step_reward_strategy`); per-step rewards are in info."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.harbor.env import STEP_INFO_KEY, task_rows
from skyrl_gym.envs.harbor.task import load_task
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, arun, bash_call, needs_bwrap

pytestmark = needs_bwrap

MULTI = Path(__file__).parent / "real_format" / "multi-step-notes"
FIRST, SECOND = (s.instruction for s in load_task(MULTI).steps)


def _copy(tmp_path: Path, *, edit=None) -> Path:
    task = tmp_path / "tasks" / MULTI.name
    shutil.copytree(MULTI, task)
    if edit is not None:
        toml = task / "task.toml"
        toml.write_text(edit(toml.read_text()))
    return task


def test_each_step_is_verified_then_the_next_instruction_is_the_observation() -> None:
    env = skyrl_gym.make("harbor", tasks=task_rows(MULTI))
    try:
        obs, _ = env.reset()
        assert obs[-1] == {"role": "user", "content": FIRST}
        obs, reward, done, _, info = env.step(bash_call("echo first > notes.txt"))
        assert not done and reward == 0.0
        obs, reward, done, _, info = env.step(ANSWER)
        assert (obs, reward, done) == ([{"role": "user", "content": SECOND}], 0.0, False)
        assert info[STEP_INFO_KEY]["name"] == "01-create"
        assert info[STEP_INFO_KEY]["reward"] == 1.0
        assert info[STEP_INFO_KEY]["ended_by"] == "answer"
        # Step 2 works on step 1's file (one environment) in a fresh sandbox.
        obs, *_ = env.step(bash_call("cat notes.txt && echo second >> notes.txt"))
        assert obs[0]["content"].strip() == "first"
        obs, reward, done, _, info = env.step(ANSWER)
        assert done and reward == 1.0 and obs == []
        steps = info["episode"]["steps"]
        assert [(s["name"], s["reward"]) for s in steps] == [("01-create", 1.0), ("02-append", 1.0)]
        assert info["episode"]["rewards"] == {"reward": 1.0} and info["episode"]["correct"]
        assert env.unwrapped.verifier_result.reward == 1.0
    finally:
        env.close()


def test_a_step_below_its_min_reward_ends_the_episode() -> None:
    env = skyrl_gym.make("harbor", tasks=task_rows(MULTI))
    try:
        env.reset()
        obs, reward, done, _, info = env.step(ANSWER)
        assert done and reward == 0.0 and obs == []
        assert info[STEP_INFO_KEY]["below_min_reward"] is True
        assert [s["name"] for s in info["episode"]["steps"]] == ["01-create"]
    finally:
        env.close()


@pytest.mark.parametrize(("strategy", "want"), [("mean", 0.5), ("final", 0.0)])
def test_the_final_reward_follows_the_strategy(tmp_path: Path, strategy: str, want: float) -> None:
    task = _copy(
        tmp_path,
        edit=lambda t: t.replace("min_reward = 1.0\n", "").replace('"mean"', f'"{strategy}"'),
    )
    rows = task_rows(task)
    env = skyrl_gym.make("harbor", tasks=rows)
    try:
        actions = [bash_call("echo first > notes.txt"), ANSWER, ANSWER]
        traj = arun(rollout(env, ScriptedPolicy(actions), rows[0], max_turns=6), 60)
        assert traj.stop_reason.value == "done" and traj.reward == want
        assert [t.reward for t in traj.turns] == [0.0, 0.0, want]
        steps = env.unwrapped.episode_info()["steps"]
        assert [s["reward"] for s in steps] == [1.0, 0.0]
    finally:
        env.close()


def test_a_turn_after_the_steps_timeout_ends_the_step(tmp_path: Path) -> None:
    """[steps.agent].timeout_sec is checked between turns: the late turn's action is not
    run, the step is verified as it stands."""
    first = "[steps.agent]\ntimeout_sec = 30.0"
    task = _copy(tmp_path, edit=lambda t: t.replace(first, "[steps.agent]\ntimeout_sec = 1.0", 1))
    env = skyrl_gym.make("harbor", tasks=task_rows(task))
    try:
        env.reset()
        env.step(bash_call("echo first > notes.txt && sleep 1.5"))
        obs, reward, done, _, info = env.step(bash_call("echo wrong > notes.txt"))
        assert info[STEP_INFO_KEY]["ended_by"] == "timeout"
        assert info[STEP_INFO_KEY]["reward"] == 1.0  # the late write did not run
        assert obs == [{"role": "user", "content": SECOND}] and not done
    finally:
        env.close()


def test_a_failed_step_verifier_ends_the_episode_with_no_reward(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "steps" / "01-create" / "tests" / "test.sh").write_text("#!/bin/bash\ntrue\n")
    env = skyrl_gym.make("harbor", tasks=task_rows(task))
    try:
        env.reset()
        obs, reward, done, _, info = env.step(ANSWER)
        assert done and reward == 0.0
        assert info["episode"]["verifier_error"] == "reward_file_not_found"
        assert info["episode"]["verifier_message"].startswith("step 01-create: ")
    finally:
        env.close()


def test_averify_grades_the_step_the_episode_ended_in() -> None:
    """An episode cut short (the caller's turn limit) is graded on the step it was in."""
    env = skyrl_gym.make("harbor", tasks=task_rows(MULTI))
    try:
        env.reset()
        env.step(bash_call("echo first > notes.txt"))
        env.step(ANSWER)
        env.step(bash_call("echo second >> notes.txt"))
        result = arun(env.unwrapped.averify(), 60)
        assert result.reward == 1.0
        steps = env.unwrapped.episode_info()["steps"]
        assert [(s["name"], s["ended_by"]) for s in steps] == [
            ("01-create", "answer"),
            ("02-append", "episode_end"),
        ]
        assert arun(env.unwrapped.averify(), 60) is result  # idempotent
    finally:
        env.close()


def test_a_multi_step_env_passes_check_env() -> None:
    import warnings

    from skyrl_gym.checker import check_env

    env = skyrl_gym.make("harbor", tasks=task_rows(MULTI))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one task: every seed plays the same episode
            check_env(env)
    finally:
        env.close()
