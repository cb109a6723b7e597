"""`make("harbor")` episodes name the limit that ended their grading (issue 28, part 4):
`stage_stop = verifier_timeout` in the episode's info when test.sh ran past
`[verifier].timeout_sec`, and the agent's clock (the rollout's timeout) starts only once
`HarborEnv.astart_environment` has built and started the environment."""

from __future__ import annotations

import time
from pathlib import Path

from skyrl_gym.envs.harbor.env import HarborEnv
from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import StopReason
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, arun, bash_call, needs_bwrap

REAL_FORMAT = Path(__file__).parent / "real_format"


def _env(name: str) -> tuple[HarborEnv, dict]:
    row = {"task_id": name, "path": str(REAL_FORMAT / name)}
    return HarborEnv([row]), row


@needs_bwrap
def test_a_verifier_past_its_timeout_is_the_episodes_stage_stop() -> None:
    env, row = _env("verifier-timeout")
    policy = ScriptedPolicy({row["task_id"]: [bash_call("echo ok > /app/done.txt"), ANSWER]})
    try:
        trajectory = arun(LoopAgent(policy, RolloutLimits(max_turns=4)).play(env, row), 120)
        assert trajectory.stop_reason is StopReason.DONE and trajectory.reward == 0.0
        info = env.episode_info()
        assert info["stage_stop"] == "verifier_timeout"
        assert info["verifier_error"] == "verifier_timeout"
    finally:
        env.close()


@needs_bwrap
def test_a_prestarted_environment_is_not_on_the_agents_clock(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))  # build the slow root for real
    env, row = _env("slow-build")
    actions = [bash_call("cp /var/lib/build.stamp /app/answer.txt"), ANSWER]
    policy = ScriptedPolicy({row["task_id"]: actions})
    try:
        t0 = time.perf_counter()
        arun(env.astart_environment(row), 120)
        assert time.perf_counter() - t0 >= 4  # the Dockerfile's RUN sleep 4
        limits = RolloutLimits(max_turns=4, timeout=3.0)  # shorter than the build
        trajectory = arun(LoopAgent(policy, limits).play(env, row), 120)
        assert trajectory.stop_reason is StopReason.DONE and trajectory.reward == 1.0
        assert trajectory.duration_s < 3
    finally:
        env.close()
