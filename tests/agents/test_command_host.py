"""`agent_phase` on a Harbor env: the agent phase's runtime forwards the port and keeps the
env's own grading settings; afterwards the env makes its runtimes as before."""

from __future__ import annotations

import functools

from skyrl_gym.envs.harbor.env import HarborEnv
from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_sdk.agents.command_host import agent_phase
from skyrl_sdk.agents.command_runtime import CommandRuntime
from skyrl_sdk.agents.command_spec import CommandAgent


def test_agent_phase_keeps_the_envs_grading_settings_and_restores_them() -> None:
    env = HarborEnv([{"task_id": "t", "path": "/nonexistent"}])
    own = functools.partial(HarborRuntime, require_exit_zero=True)
    env.make_runtime = own
    with agent_phase(env, CommandAgent(command="true"), 4321):
        made = env.make_runtime
        assert isinstance(made, functools.partial) and made.func is CommandRuntime
        assert made.keywords["require_exit_zero"] is True  # the verifier stays as strict
        assert made.keywords["agent_ports"] == (4321,)
    assert env.make_runtime is own
