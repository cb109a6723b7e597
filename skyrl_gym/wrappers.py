"""Wrappers that `make` puts around every env: order enforcement, a turn limit, episode stats.

Each wrapper is a `gymnasium.Wrapper` that also forwards the async `areset`/`astep`, so an env's
native async implementation is kept. A wrapper only overrides the three hooks below; the sync
and async paths share them.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, coerce_action


class TextWrapper(gym.Wrapper[Messages, str, Messages, str]):
    """Base wrapper for text envs; subclasses override `on_reset`, `on_action`, `on_step`."""

    def on_reset(self, result: tuple[Messages, dict[str, Any]]) -> tuple[Messages, dict[str, Any]]:
        return result

    def on_action(self, action: str) -> str:
        return action

    def on_step(self, result: StepReturn) -> StepReturn:
        return result

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        return self.on_reset(self.env.reset(seed=seed, options=options))

    def step(self, action: str) -> StepReturn:
        return self.on_step(self.env.step(self.on_action(action)))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        return self.on_reset(await self.env.areset(seed=seed, options=options))  # type: ignore[attr-defined]

    async def astep(self, action: str) -> StepReturn:
        return self.on_step(await self.env.astep(self.on_action(action)))  # type: ignore[attr-defined]


class OrderEnforcing(TextWrapper):
    """Raises `ResetNeeded` on a step before `reset` or after the episode ended, and makes
    every action a valid `str` (bytes decoded, invalid UTF-8 replaced)."""

    def __init__(self, env: gym.Env[Messages, str]):
        super().__init__(env)
        self._has_reset = False
        self._done = False

    def on_reset(self, result: tuple[Messages, dict[str, Any]]) -> tuple[Messages, dict[str, Any]]:
        self._has_reset, self._done = True, False
        return result

    def on_action(self, action: str) -> str:
        if not self._has_reset:
            raise ResetNeeded("call reset() before step()")
        if self._done:
            raise ResetNeeded("the episode has ended (terminated or truncated): call reset()")
        return coerce_action(action)

    def on_step(self, result: StepReturn) -> StepReturn:
        self._done = bool(result[2] or result[3])
        return result


class TurnLimit(TextWrapper):
    """Sets `truncated=True` once `max_turns` steps were taken without the task ending."""

    def __init__(self, env: gym.Env[Messages, str], max_turns: int):
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        super().__init__(env)
        self.max_turns = max_turns
        self.turns = 0

    def on_reset(self, result: tuple[Messages, dict[str, Any]]) -> tuple[Messages, dict[str, Any]]:
        self.turns = 0
        return result

    def on_step(self, result: StepReturn) -> StepReturn:
        self.turns += 1
        messages, reward, terminated, truncated, info = result
        if self.turns >= self.max_turns and not terminated and not truncated:
            truncated = True
            info["truncated_by"] = "max_turns"
        return messages, reward, terminated, truncated, info


class EpisodeStatistics(TextWrapper):
    """On the last step of an episode, puts a summary in `info["episode"]`: return, turns,
    parse errors, tool calls, wall time, plus any metrics the env reported there itself."""

    _return = 0.0
    _turns = 0
    _parse_errors = 0
    _tool_calls = 0
    _started = 0.0

    def on_reset(self, result: tuple[Messages, dict[str, Any]]) -> tuple[Messages, dict[str, Any]]:
        self._return, self._turns, self._parse_errors, self._tool_calls = 0.0, 0, 0, 0
        self._started = time.perf_counter()
        return result

    def on_step(self, result: StepReturn) -> StepReturn:
        info = result[4]
        self._return += result[1]
        self._turns += 1
        if info.get("parse_error") is not None:
            self._parse_errors += 1
        if tool_calls := info.get("tool_calls"):
            self._tool_calls += len(tool_calls)
        if result[2] or result[3]:
            episode = {
                "return": self._return,
                "turns": self._turns,
                "parse_errors": self._parse_errors,
                "tool_calls": self._tool_calls,
                "terminated": bool(result[2]),
                "truncated": bool(result[3]),
                "duration_s": time.perf_counter() - self._started,
            }
            if env_metrics := info.get("episode"):
                episode.update(env_metrics)
            info["episode"] = episode
        return result
