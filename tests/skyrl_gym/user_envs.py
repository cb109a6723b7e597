"""Small envs for tests: one that follows the contract, and others that each break one rule."""

from __future__ import annotations

import random

import numpy as np

from skyrl_gym import TextEnv


class CountdownEnv(TextEnv):
    """Terminates with reward 1 after `length` steps, whatever the action."""

    def __init__(self, length: int = 3):
        self.length = length
        self.left = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = self.length
        return [{"role": "user", "content": f"{self.left} steps to go"}], {}

    def step(self, action):
        if self.left <= 0:
            raise RuntimeError("reset first")
        self.left -= 1
        done = self.left == 0
        return [{"role": "user", "content": f"{self.left} left"}], float(done), done, False, {}


def not_an_env():
    return object()


class StepsBeforeReset(CountdownEnv):
    def step(self, action):
        return [], 0.0, False, False, {}


class BadResetType(CountdownEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "hello"


class MalformedMessage(CountdownEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [{"role": "narrator", "content": "hi"}], {}


class EmptyReset(CountdownEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [], {}


class IgnoresSeed(CountdownEnv):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = self.length
        return [{"role": "user", "content": f"task {random.random()}"}], {}


class IntReward(CountdownEnv):
    def step(self, action):
        messages, reward, terminated, truncated, info = super().step(action)
        return messages, int(reward), terminated, truncated, info


class NumpyFlags(CountdownEnv):
    def step(self, action):
        messages, reward, terminated, truncated, info = super().step(action)
        return messages, reward, np.bool_(terminated), truncated, info


class RandomStep(CountdownEnv):
    def step(self, action):
        super().step(action)
        return [{"role": "user", "content": str(random.random())}], 0.0, False, False, {}


class ChokesOnBigActions(CountdownEnv):
    def step(self, action):
        if len(action) > 1000:
            raise ValueError("too long")
        action.encode("utf-8")  # raises on lone surrogates
        return super().step(action)


class CloseTwiceFails(CountdownEnv):
    closed = False

    def close(self):
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True


class AsyncDisagrees(CountdownEnv):
    async def areset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [{"role": "user", "content": "something else"}], {}


class BadSpaces(CountdownEnv):
    action_space = None  # type: ignore[assignment]
