"""The text-env contract: spaces, action coercion, task selection, async defaults."""

import asyncio

import pytest

import skyrl_gym
from skyrl_gym.core import MessagesSpace, TextSpace, coerce_action
from skyrl_gym.envs.math.env import MathEnv
from skyrl_gym.tasks import TaskError


def test_text_space_accepts_any_unicode_up_to_its_limit():
    space = TextSpace(max_chars=10)
    assert space.contains("héllo ✓")
    assert not space.contains("x" * 11)
    assert not space.contains(b"bytes")
    space.seed(3)
    first = space.sample()
    space.seed(3)
    assert space.sample() == first and space.contains(first)


def test_messages_space_checks_roles_and_content():
    space = MessagesSpace(max_messages=2)
    assert space.contains([{"role": "user", "content": "hi"}])
    assert not space.contains([{"role": "narrator", "content": "hi"}])
    assert not space.contains([{"role": "user", "content": 3}])
    assert not space.contains([{"role": "user", "content": "a"}] * 3)
    assert space.contains(space.sample())


def test_coerce_action_repairs_invalid_utf8_and_bytes():
    assert coerce_action("plain") == "plain"
    repaired = coerce_action("bad \udcff")
    repaired.encode("utf-8")  # would raise on a lone surrogate
    assert repaired.startswith("bad ")
    assert coerce_action(b"\xff\xfeok") == "\ufffd\ufffdok"
    with pytest.raises(TypeError, match="must be str"):
        coerce_action(42)


def test_seed_picks_the_task_deterministically_and_options_override_it():
    env = MathEnv()
    first = env.reset(seed=5)[1]["task_id"]
    assert env.reset(seed=5)[1]["task_id"] == first
    assert len({env.reset(seed=s)[1]["task_id"] for s in range(20)}) > 5
    row = {"task_id": "mine", "question": "What is 2 + 2?", "answer": "4"}
    messages, info = env.reset(seed=5, options={"task": row})
    assert info["task_id"] == "mine" and messages[-1]["content"] == "What is 2 + 2?"


def test_task_row_missing_a_field_is_named_in_the_error():
    env = MathEnv()
    with pytest.raises(TaskError, match=r"task 'bad' is missing field\(s\) 'answer'"):
        env.reset(options={"task": {"task_id": "bad", "question": "?"}})
    with pytest.raises(TaskError, match="task_id"):
        env.reset(options={"task": {"question": "?", "answer": "1"}})


def test_env_without_dataset_explains_how_to_give_a_task():
    with pytest.raises(ValueError, match="has no dataset"):
        MathEnv(tasks=[]).reset(seed=0)


def test_default_async_methods_match_sync_ones():
    env = skyrl_gym.make("sql-basic")
    sync = env.reset(seed=2)[0]

    async def run():
        messages, _ = await env.areset(seed=2)
        step = await env.astep("<sql>SELECT COUNT(*) FROM customers</sql>")
        return messages, step

    messages, step = asyncio.run(run())
    assert messages == sync
    assert "8" in step[0][0]["content"]
    env.close()


def test_text_env_cannot_be_instantiated_without_step():
    class NoStep(skyrl_gym.TextEnv):
        def reset(self, *, seed=None, options=None):
            return super().reset(seed=seed)

    with pytest.raises(TypeError, match="abstract"):
        NoStep()


def test_inline_async_runs_cheap_steps_on_the_event_loop_thread():
    import threading

    from tests.skyrl_gym.user_envs import CountdownEnv

    class Recording(CountdownEnv):
        def step(self, action):
            self.thread = threading.get_ident()
            return super().step(action)

    class Cheap(Recording):
        inline_async = True

    async def play(env):
        await env.areset(seed=0)
        await env.astep("x")
        return env.thread

    loop_thread = threading.get_ident()
    assert asyncio.run(play(Cheap())) == loop_thread
    assert asyncio.run(play(Recording())) != loop_thread  # a worker thread by default
