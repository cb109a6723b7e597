"""The one episode runner: the `Agent` protocol, the loop agent, `run_episodes` with any
agent, `close_env`, and the one turn assembler that rollout and `skyrl serve`'s capture share."""

from __future__ import annotations

import asyncio
import threading

import pytest

import skyrl_gym
from skyrl_gym.core import TaskEnv
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_sdk.agents.agent import Agent, PlayableEnv, close_env, reset_env, step_env
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import Completion, FinishReason
from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits, rollout, run_episodes
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.serving.capture import Answer, _turn
from skyrl_sdk.agents.trajectory import StopReason, Trajectory, sampled_turn
from skyrl_sdk.tools.calls import ToolCall

TASKS = bundled_tasks()


def oracle(task: dict) -> list[str]:
    return [f"<calculator>{task['expression']}</calculator>", f"<answer>{task['answer']}</answer>"]


def _without_times(t: Trajectory) -> dict:
    data = t.to_json()
    for key in ("started_at", "duration_s"):
        data.pop(key)
    for turn in data["turns"]:
        turn.pop("llm_s"), turn.pop("env_s")
    return data


class _Recorder:
    """An `Agent` that plays nothing: records the env, task and ids it was given."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[object, str, str | None, str]] = []

    async def play(self, env, task, *, episode_id=None, env_id=""):
        self.seen.append((env, task["task_id"], episode_id, env_id))
        return Trajectory(
            episode_id or "",
            task["task_id"],
            env_id,
            self.name,
            StopReason.DONE,
            (),
            (),
            (),
            1.0,
            True,
        )


class _Closing:
    """A stand-in env that records on which thread it was closed."""

    def __init__(self, inline: bool, fail: bool = False) -> None:
        self.inline_async = inline
        self.fail = fail
        self.closed_on: list[int] = []

    async def areset(self, *, seed=None, options=None):
        return [{"role": "user", "content": "hi"}], {}

    async def astep(self, action):
        return [], 1.0, True, False, {}

    def close(self) -> None:
        self.closed_on.append(threading.get_ident())
        if self.fail:
            raise OSError("close failed")


def test_both_agents_and_the_loop_agent_follow_the_protocol() -> None:
    from skyrl_sdk.agents.command_agent import CommandAgent, CommandAgentRunner

    policy = ScriptedPolicy(["x"])
    loop = LoopAgent(policy)
    command = CommandAgentRunner(CommandAgent("true"), policy)
    assert isinstance(loop, Agent) and isinstance(command, Agent)
    assert not isinstance(policy, Agent)  # a policy is not an agent: run_episodes wraps it
    assert loop.name == policy.name and command.name == f"{policy.name} via command:true"
    assert command.run == command.play  # the old name of the method


def test_the_loop_agent_plays_as_rollout_does(chatml_renderer: ChatRenderer) -> None:
    script = {t["task_id"]: oracle(t) for t in TASKS[:3]}
    limits = RolloutLimits(max_turns=4, max_tokens=64)

    def play(task: dict, agent: bool) -> Trajectory:
        env = skyrl_gym.make("math")
        policy = ScriptedPolicy(script, renderer=chatml_renderer)
        try:
            if agent:
                return asyncio.run(
                    LoopAgent(policy, limits).play(env, task, episode_id="e", env_id="math")
                )
            return asyncio.run(
                rollout(env, policy, task, limits=limits, episode_id="e", env_id="math")
            )
        finally:
            env.close()

    for task in TASKS[:3]:
        assert _without_times(play(task, True)) == _without_times(play(task, False))


def test_run_episodes_plays_any_agent_in_input_order_and_closes_every_env() -> None:
    made: list[_Closing] = []

    def make_env() -> _Closing:
        made.append(_Closing(inline=False))
        return made[-1]

    agent = _Recorder()
    episodes = [(f"e{i}", {"task_id": f"t{i}"}) for i in range(5)]
    out = asyncio.run(run_episodes(make_env, agent, episodes, concurrency=2, env_id="x"))
    assert [t.episode_id for t in out] == [e for e, _ in episodes]
    assert [(s[1], s[2], s[3]) for s in agent.seen] == [(f"t{i}", f"e{i}", "x") for i in range(5)]
    assert len(made) == 5 and all(len(env.closed_on) == 1 for env in made)


def test_run_episodes_turns_a_failing_make_into_an_env_error_of_the_agent() -> None:
    def make_env() -> PlayableEnv:
        raise ValueError("no such env")

    (t,) = asyncio.run(run_episodes(make_env, _Recorder(), [("e", {"task_id": "t"})]))
    assert t.stop_reason is StopReason.ENV_ERROR and t.policy == "recorder"
    assert t.error == "make: ValueError: no such env"


def test_limits_and_sampling_belong_to_the_loop_agent() -> None:
    with pytest.raises(TypeError, match="LoopAgent"):
        asyncio.run(
            run_episodes(
                lambda: _Closing(True),
                _Recorder(),
                [("e", {"task_id": "t"})],
                limits=RolloutLimits(),
            )
        )


def test_close_env_closes_cheap_envs_on_the_loop_and_others_in_a_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def close(env: _Closing) -> int:
        await close_env(env)
        return threading.get_ident()

    cheap, blocking, failing = _Closing(True), _Closing(False), _Closing(False, fail=True)
    assert cheap.closed_on == [asyncio.run(close(cheap))]
    loop_thread = asyncio.run(close(blocking))
    assert len(blocking.closed_on) == 1 and blocking.closed_on[0] != loop_thread
    asyncio.run(close(failing))  # a failing close is swallowed: the trajectory is what counts
    assert len(failing.closed_on) == 1
    assert "closing _Closing failed: OSError: close failed" in caplog.text  # but it is said


def test_close_env_awaits_an_async_close() -> None:
    closed: list[bool] = []

    class AsyncClose(_Closing):
        async def _close(self) -> None:
            closed.append(True)

        def close(self):  # returns an awaitable, as an async close does
            return self._close()

    asyncio.run(close_env(AsyncClose(True)))
    asyncio.run(close_env(AsyncClose(False)))
    assert closed == [True, True]


def test_reset_env_and_step_env_drive_an_env_for_hosts_outside_the_agents() -> None:
    env = skyrl_gym.make("math")
    try:
        messages, _ = asyncio.run(reset_env(env, options={"task": TASKS[0]}))
        assert messages and messages[-1]["role"] == "user"
        _, reward, terminated, _, _ = asyncio.run(
            step_env(env, f"<answer>{TASKS[0]['answer']}</answer>")
        )
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_rollout_and_capture_assemble_turns_the_same_way() -> None:
    completion = Completion((5, 6, 7), (0.0, -0.5, -1.0), "hi", FinishReason.STOP, policy_version=4)
    calls = (ToolCall("answer", {"answer": "1"}),)
    answer = Answer((1, 2), (), completion, "hi", "k", calls, None, 0.25)
    captured = _turn(answer, 2, 1)
    assembled = sampled_turn(2, 1, "hi", completion, (), (), 0.0, calls, None, 0.25)
    assert captured == assembled
    assert captured.policy_versions == completion.versions() == (4, 4, 4)
    assert captured.token_ids == (5, 6, 7) and captured.logprobs == (0.0, -0.5, -1.0)


def test_run_episodes_with_a_slow_env_task_env_still_closes_each(
    chatml_renderer: ChatRenderer,
) -> None:
    closes: list[int] = []

    class Counted(TaskEnv):
        required_fields = ()

        def start(self, task):
            return [{"role": "user", "content": "go"}]

        def step(self, action):
            return [], 1.0, True, False, {}

        def close(self) -> None:
            closes.append(1)

    out = asyncio.run(
        run_episodes(
            Counted,
            ScriptedPolicy(["x"]),
            [(f"e{i}", {"task_id": f"t{i}"}) for i in range(4)],
            concurrency=2,
        )
    )
    assert [t.stop_reason for t in out] == [StopReason.DONE] * 4 and len(closes) == 4
