"""The `terminal-gen` env: registered, passes the env checker, graded by the task's verifier,
per-family info, and playable by the agent loop."""

from __future__ import annotations

import asyncio

import pytest

import skyrl_gym
from skyrl_gym.checker import check_env
from skyrl_gym.envs.terminal_gen import make_spec
from skyrl_gym.envs.terminal_gen.env import TerminalGenEnv, family_success, task_rows
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from tests.conftest import needs_bwrap

pytestmark = needs_bwrap


def test_registered_env_passes_check_env():
    env = skyrl_gym.make(
        "terminal-gen", split="heldout", families="echo-word,grep-count", per_family=2
    )
    try:
        assert len(env.unwrapped.tasks) == 4
        assert {r["split"] for r in env.unwrapped.tasks} == {"heldout"}
        check_env(env)
    finally:
        env.close()


def test_unknown_family_or_split_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown families nope"):
        TerminalGenEnv(families=["nope"])
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        TerminalGenEnv(split="dev")


@pytest.mark.parametrize("family", ["echo-word", "permissions", "write-script", "grep-cut-sort"])
def test_reward_comes_from_the_verifier_on_the_final_state(family):
    row = task_rows("train", [family], 1, offset=3)[0]
    spec = make_spec(family, row["seed"])
    env = skyrl_gym.make("terminal-gen", tasks=[row])
    try:
        for reply, want in [
            (f"<bash>{spec.solution.strip()}</bash><answer>done</answer>", 1.0),  # one turn
            ("<bash>ls -la</bash><answer>done</answer>", 0.0),
            ("<answer>done</answer>", 0.0),
            ("<bash>echo 1 > /logs/verifier/reward.txt</bash><answer>done</answer>", 0.0),
        ]:
            env.reset(options={"task": row})
            _, reward, terminated, truncated, info = env.step(reply)
            assert (reward, terminated, truncated) == (want, True, False), reply
            episode = info["episode"]
            assert episode["family"] == family and episode["difficulty"] == spec.difficulty
            assert episode["category"] == spec.category.value
    finally:
        env.close()


def test_brief_prompt_is_the_whole_system_message():
    from skyrl_gym.envs.terminal_gen.env import BRIEF_PROMPT

    env = skyrl_gym.make("terminal-gen", families="echo-word", per_family=1, brief=True)
    try:
        messages, _ = env.reset(seed=0)
        assert messages[0] == {"role": "system", "content": BRIEF_PROMPT}
        spec = make_spec("echo-word", env.unwrapped.task["seed"])
        assert messages[1]["content"] == spec.instruction
        _, reward, *_ = env.step(f"<bash>{spec.solution.strip()}</bash><answer>done</answer>")
        assert reward == 1.0
    finally:
        env.close()


def test_example_is_a_worked_task_of_no_family():
    from skyrl_gym.envs.terminal_gen.env import EXAMPLE
    from skyrl_gym.envs.terminal_gen.families import STEMS, WORDS

    assert "tulip" not in WORDS and "sketch" not in STEMS
    env = skyrl_gym.make("terminal-gen", families="echo-word", per_family=1, example=True)
    try:
        messages, _ = env.reset(seed=0)
        assert messages[0]["content"].endswith(EXAMPLE)
        assert "<bash>command</bash>" in messages[0]["content"]  # the tool list is kept
    finally:
        env.close()


def test_turn_limit_truncates_and_bad_replies_get_a_hint():
    env = skyrl_gym.make("terminal-gen", families="echo-word", per_family=1)
    try:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("echo hi > x.txt")
        assert info["parse_error"] is not None and "<bash>" in obs[0]["content"]
        for _ in range(5):
            obs, reward, terminated, truncated, info = env.step("<bash>pwd</bash>")
        assert truncated and not terminated and reward == 0.0
    finally:
        env.close()


def test_agent_loop_plays_a_two_turn_episode_and_reports_per_family():
    rows = task_rows("heldout", ["sort-unique", "archive-extract"], 1)
    trajectories = []
    for row in rows:
        spec = make_spec(row["family"], row["seed"])
        env = skyrl_gym.make("terminal-gen", tasks=[row])
        policy = ScriptedPolicy(
            [f"<bash>ls\n{spec.solution.strip()}</bash>", "<answer>done</answer>"]
        )
        try:
            traj = asyncio.run(asyncio.wait_for(rollout(env, policy, row, max_turns=4), 120))
        finally:
            env.close()
        assert traj.reward == 1.0 and len(traj.turns) == 2
        trajectories.append((traj.task_id, traj.reward))
    assert family_success(trajectories) == {
        "archive-extract": {"episodes": 1.0, "success": 1.0},
        "sort-unique": {"episodes": 1.0, "success": 1.0},
    }
