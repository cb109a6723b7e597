"""The `harbor` env: registered, passes the env checker, playable by the agent loop."""

from __future__ import annotations

import skyrl_gym
from skyrl_gym.checker import check_env
from skyrl_gym.envs.harbor.env import HarborEnv, task_rows
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, arun, bash_call, make_task, needs_bwrap

pytestmark = needs_bwrap


def test_registered_env_passes_check_env():
    env = skyrl_gym.make("harbor")
    try:
        assert len(env.unwrapped.tasks) >= 8
        check_env(env)
    finally:
        env.close()


def test_episode_reward_comes_from_the_tasks_verifier(tmp_path):
    make_task(tmp_path, "done-file")
    rows = task_rows(tmp_path)
    assert rows == [{"task_id": "done-file", "path": str(tmp_path / "done-file")}]
    for actions, want in [
        ([bash_call("echo ok > done.txt && pwd"), ANSWER], 1.0),
        ([bash_call("echo 1 > /logs/verifier/reward.txt"), ANSWER], 0.0),
    ]:
        env = HarborEnv(rows)
        try:
            traj = arun(rollout(env, ScriptedPolicy(actions), rows[0], max_turns=4), 60)
            assert traj.reward == want and traj.stop_reason.value == "done"
            assert traj.turns[0].observation[0]["content"].strip() in ("/app", "[no output]")
            assert env.verifier_result is not None and env.verifier_result.rewards == {
                "reward": want
            }
        finally:
            env.close()
            env.close()


def test_make_harbor_pass_env_templates_only_allowed_variables(tmp_path, monkeypatch):
    """`make("harbor", pass_env=[...])`: only the named host variables reach `${VAR}`."""
    monkeypatch.setenv("HB_ALLOWED", "allowed-value")
    monkeypatch.setenv("HB_SECRET", "secret-value")
    toml = """\
    schema_version = "1.4"
    [verifier]
    timeout_sec = 30.0
    [environment]
    network_mode = "no-network"
    env = { A = "${HB_ALLOWED}", S = "${HB_SECRET}", D = "${HB_SECRET:-dflt}" }
    """
    rows = task_rows(make_task(tmp_path, "templated", toml=toml))
    actions = [bash_call('echo "A=$A S=$S D=$D"'), ANSWER]
    for kwargs, want in [
        ({"pass_env": ["HB_ALLOWED"]}, "A=allowed-value S= D=dflt"),
        ({}, "A= S= D=dflt"),
    ]:
        env = skyrl_gym.make("harbor", tasks=rows, **kwargs)
        try:
            traj = arun(rollout(env, ScriptedPolicy(actions), rows[0], max_turns=4), 60)
            assert traj.turns[0].observation[0]["content"].strip() == want
            notes = env.unwrapped.runtime.notes if env.unwrapped.runtime else []
        finally:
            env.close()
        assert "secret-value" not in "\n".join(notes)
