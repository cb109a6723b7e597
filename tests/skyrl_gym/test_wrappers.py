"""EpisodeGuard's construction: the state gym.Wrapper's own __init__ would give, built cheaply."""

from __future__ import annotations

import gymnasium as gym
import pytest

from skyrl_gym import wrappers
from skyrl_gym.core import TextSpace
from skyrl_gym.envs.math.single import MathAnswerEnv
from skyrl_gym.wrappers import EpisodeGuard

TASK = {"task_id": "t", "question": "?", "answer": "215"}


def test_guard_reads_like_a_gym_wrapper_of_the_same_env():
    env = MathAnswerEnv()
    reference, guard = gym.Wrapper(env), EpisodeGuard(env)
    for name, value in vars(reference).items():  # every field gym.Wrapper.__init__ sets
        assert getattr(guard, name) is value, name
    for name in ("action_space", "observation_space", "metadata", "spec", "unwrapped"):
        assert getattr(guard, name) == getattr(reference, name), name
    assert guard.max_turns is None and guard.turns == 0


def test_overriding_a_space_stays_on_that_guard():
    first, second = EpisodeGuard(MathAnswerEnv()), EpisodeGuard(MathAnswerEnv())
    first.action_space = TextSpace(max_chars=7)
    assert first.action_space == TextSpace(max_chars=7)
    assert second.action_space == TextSpace()  # the class-level default is untouched
    assert EpisodeGuard._action_space is None


def test_guard_refuses_what_is_not_a_gym_env():
    with pytest.raises(TypeError, match=r"Expected env to be a `gymnasium\.Env`"):
        EpisodeGuard(object())  # type: ignore[arg-type]


def test_guard_falls_back_to_gym_wrapper_init(monkeypatch):
    # A Gymnasium whose Wrapper sets other fields: the guard calls its __init__ instead.
    monkeypatch.setattr(wrappers, "_WRAPPER_DEFAULTS", None)
    called = []
    original = gym.Wrapper.__init__

    def spy(self, env):
        called.append(env)
        original(self, env)

    monkeypatch.setattr(gym.Wrapper, "__init__", spy)
    env = MathAnswerEnv()
    guard = EpisodeGuard(env, max_turns=2)
    assert called == [env] and guard.env is env and guard.max_turns == 2
    guard.reset(options={"task": TASK})
    assert guard.step("#### 215")[1] == 1.0


def test_wrapper_defaults_are_the_none_fields_of_gym_wrapper():
    fields = {k: v for k, v in vars(gym.Wrapper(MathAnswerEnv())).items() if k != "env"}
    assert wrappers._wrapper_defaults() == (
        fields if all(v is None for v in fields.values()) else None
    )
    assert wrappers._WRAPPER_DEFAULTS is not None  # today's Gymnasium: the cheap path runs
    assert all(getattr(EpisodeGuard, name) is None for name in wrappers._WRAPPER_DEFAULTS)
