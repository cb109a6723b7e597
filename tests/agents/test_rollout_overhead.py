"""What makes the agent loop cheap keeps what it records: fast frozen records, the policy's
view of the ids, inline steps, and run_episodes' worker pool (the prompt memo:
test_prompt_cache.py; the view itself: test_token_view.py)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import importlib
import pickle
import sys

import pytest

import skyrl_gym
from skyrl_gym.core import TaskEnv
from skyrl_gym.envs.math.env import MathEnv, bundled_tasks
from skyrl_gym.step_info import StepInfo
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import FinishReason, GenerationContext
from skyrl_sdk.agents.rollout import RolloutLimits, TokenView, rollout, run_episodes
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import Trajectory, Turn, new_turn
from skyrl_sdk.fast_frozen import fast_constructor
from skyrl_sdk.tools.calls import ToolCall

# `skyrl_sdk.agents` re-exports the function `rollout`, which hides the module's name.
rollout_module = importlib.import_module("skyrl_sdk.agents.rollout")

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


# -- fast_constructor ---------------------------------------------------------------------


TURN_ARGS = dict(
    index=1,
    segment=0,
    action="a",
    token_ids=(5, 6),
    logprobs=(0.0, -1.0),
    policy_versions=(3, 3),
    finish_reason=FinishReason.STOP,
    observation=({"role": "user", "content": "o"},),
    observation_ids=(7,),
    reward=0.5,
)


@pytest.mark.parametrize("use_kwargs", [True, False])
def test_fast_constructor_builds_the_same_frozen_record(use_kwargs: bool) -> None:
    args = TURN_ARGS if use_kwargs else {}
    fast = new_turn(**args) if use_kwargs else new_turn(*TURN_ARGS.values())
    slow = Turn(**TURN_ARGS)
    assert type(fast) is Turn and fast == slow and repr(fast) == repr(slow)
    assert fast.tool_calls == () and fast.parse_error is None  # defaults applied
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.reward = 1.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fast)) == slow
    assert copy.deepcopy(fast) == slow
    assert dataclasses.replace(fast, reward=2.0) == Turn(**{**TURN_ARGS, "reward": 2.0})
    with pytest.raises(TypeError):
        new_turn(index=1)  # missing fields are an error, as with Turn(...)


def test_fast_constructor_works_for_dict_based_classes_and_refuses_others() -> None:
    new_context = fast_constructor(GenerationContext)
    context = new_context("e", "t", 2)
    assert type(context) is GenerationContext and context == GenerationContext("e", "t", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.turn = 3  # type: ignore[misc]

    @dataclasses.dataclass
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x")

    for cls in (Mutable, Checked, int):
        with pytest.raises(TypeError):
            fast_constructor(cls)


def test_step_protocol_reads_give_real_frozen_records() -> None:
    info = {"tool_calls": [{"name": "calculator", "arguments": {"e": "1"}, "id": None}]}
    step = StepInfo.read(info)
    assert type(step) is StepInfo and type(step.tool_calls[0]) is ToolCall
    assert step == StepInfo((ToolCall("calculator", {"e": "1"}),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.tool_calls[0].name = "x"  # type: ignore[misc]
    info["tool_calls"][0]["arguments"]["e"] = "2"  # the read copied the arguments
    assert step.tool_calls[0].arguments == {"e": "1"}

    class Sub(StepInfo):
        pass

    assert type(Sub.read(info)) is Sub


def test_trajectories_pickle_and_round_trip_through_json(chatml_renderer: ChatRenderer) -> None:
    env = skyrl_gym.make("math")
    policy = ScriptedPolicy(oracle(TASKS[0]), renderer=chatml_renderer)
    t = asyncio.run(rollout(env, policy, TASKS[0]))
    assert t.success and len(t.turns) == 2
    assert pickle.loads(pickle.dumps(t)) == t
    assert Trajectory.from_json(t.to_json()) == t


# -- the policy's view of the ids ---------------------------------------------------------


def test_policy_sees_the_exact_ids_without_a_copy_of_the_prompt(
    chatml_renderer: ChatRenderer,
) -> None:
    seen: list[TokenView] = []

    class Recording(ScriptedPolicy):
        async def generate(self, prompt_token_ids, sampling, *, context=None):
            seen.append(prompt_token_ids)
            return await super().generate(prompt_token_ids, sampling, context=context)

    env = skyrl_gym.make("math")
    t = asyncio.run(rollout(env, Recording(oracle(TASKS[0]), renderer=chatml_renderer), TASKS[0]))
    ids = t.segment_ids(0)
    first = t.turns[0]
    assert [tuple(v) for v in seen] == [
        t.prompt_ids,
        (*t.prompt_ids, *first.token_ids, *first.observation_ids),
    ]
    assert tuple(ids[: len(seen[1])]) == tuple(seen[1])
    assert all(type(v) is TokenView and v._prefix is t.prompt_ids for v in seen)


# -- inline steps -------------------------------------------------------------------------


class _Callers(MathEnv):
    """Records which function called `step`: EpisodeGuard.step (inline) or TextEnv.astep."""

    callers: list[str] = []

    def step(self, action):
        _Callers.callers.append(sys._getframe(1).f_code.co_name)
        return super().step(action)


class _OwnAsync(_Callers):
    async def astep(self, action):
        await asyncio.sleep(0)
        return self.step(action)


@pytest.mark.parametrize(
    "cls, inline, fast_caller, slow_caller",
    [
        (_Callers, True, "step", "astep"),  # inline: EpisodeGuard.step calls it directly
        (_Callers, False, "run", "run"),  # a worker thread, either way
        (_OwnAsync, True, "astep", "astep"),  # its own async step is always used
    ],
)
def test_cheap_sync_steps_run_inline_and_record_the_same_trajectory(
    chatml_renderer: ChatRenderer, cls, inline: bool, fast_caller: str, slow_caller: str
) -> None:
    from skyrl_gym.wrappers import EpisodeGuard

    def play(steps_inline: bool) -> Trajectory:
        env = EpisodeGuard(cls())
        env.env.inline_async = inline
        policy = ScriptedPolicy(oracle(TASKS[0]), renderer=chatml_renderer)
        saved = rollout_module._steps_inline
        if not steps_inline:
            rollout_module._steps_inline = lambda env: False
        try:
            return asyncio.run(rollout(env, policy, TASKS[0], episode_id="e"))
        finally:
            rollout_module._steps_inline = saved

    _Callers.callers = []
    fast = play(True)
    assert _Callers.callers == [fast_caller] * 2
    _Callers.callers = []
    slow = play(False)
    assert _Callers.callers == [slow_caller] * 2
    assert fast.success and _without_times(fast) == _without_times(slow)


# -- run_episodes -------------------------------------------------------------------------


class _Slow(TaskEnv):
    """Each step waits; counts the episodes running at once."""

    active = 0
    most = 0
    required_fields = ()

    def start(self, task):
        return [{"role": "user", "content": "go"}]

    async def areset(self, *, seed=None, options=None):
        _Slow.active += 1
        _Slow.most = max(_Slow.most, _Slow.active)
        await asyncio.sleep(0.01)
        return self.reset(seed=seed, options=options)

    def step(self, action):
        return [], 1.0, True, False, {}

    async def astep(self, action):
        await asyncio.sleep(0.01)
        _Slow.active -= 1
        return self.step(action)


def test_run_episodes_with_no_episodes() -> None:
    assert asyncio.run(run_episodes(_Slow, ScriptedPolicy(["x"]), [])) == []


def test_run_episodes_keeps_to_the_concurrency_and_reaches_it() -> None:
    _Slow.active = _Slow.most = 0
    episodes = [(f"e{i}", {"task_id": f"t{i}"}) for i in range(20)]
    results = asyncio.run(
        run_episodes(_Slow, ScriptedPolicy(["x"]), episodes, concurrency=5, limits=RolloutLimits())
    )
    assert [r.episode_id for r in results] == [e for e, _ in episodes]
    assert all(r.success for r in results) and _Slow.most == 5 and _Slow.active == 0


def test_episodes_that_never_wait_share_one_task(chatml_renderer: ChatRenderer) -> None:
    tasks_seen: set[int] = set()

    class Noting(ScriptedPolicy):
        async def generate(self, prompt_token_ids, sampling, *, context=None):
            tasks_seen.add(id(asyncio.current_task()))
            return await super().generate(prompt_token_ids, sampling, context=context)

    script = {t["task_id"]: oracle(t) for t in TASKS[:16]}
    episodes = [(t["task_id"], t) for t in TASKS[:16]]
    results = asyncio.run(
        run_episodes(
            lambda: skyrl_gym.make("math"),
            Noting(script, renderer=chatml_renderer),
            episodes,
            concurrency=16,
        )
    )
    assert all(r.success for r in results) and len(tasks_seen) == 1


def test_a_failing_callback_stops_run_episodes_and_leaves_no_task_behind() -> None:
    _Slow.active = _Slow.most = 0
    done: list[str] = []

    def on_done(t: Trajectory) -> None:
        done.append(t.episode_id)
        raise OSError("disk full")

    async def go() -> set[asyncio.Task]:
        with pytest.raises(OSError, match="disk full"):
            await run_episodes(
                _Slow,
                ScriptedPolicy(["x"]),
                [(f"e{i}", {"task_id": f"t{i}"}) for i in range(12)],
                concurrency=3,
                on_done=on_done,
            )
        await asyncio.sleep(0.05)
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert asyncio.run(go()) == set() and done and len(done) < 12
