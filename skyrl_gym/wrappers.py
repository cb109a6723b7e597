"""Wrappers for text envs.

`TextWrapper` is the base for wrappers that keep an env's native `areset`/`astep`.
`EpisodeGuard` is the one wrapper `make` puts around every env: it owns the episode's life
cycle (no step before reset or after the end, the turn limit, valid-`str` actions, and the
summary in `info["episode"]`). It is a single layer because it runs on every step of every
episode, and each wrapper layer costs a few Python calls per step.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import gymnasium as gym

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, coerce_action
from skyrl_gym.step_info import (
    EPISODE_KEY,
    PARSE_ERROR_KEY,
    TOOL_CALLS_KEY,
    TRUNCATED_BY_KEY,
    TruncatedBy,
)

_MAX_TURNS = TruncatedBy.MAX_TURNS.value  # looked up once: Enum's `.value` is a descriptor call


class _ProbeEnv(gym.Env[Messages, str]):
    """The smallest env, to see what `gym.Wrapper.__init__` sets."""


def _wrapper_defaults() -> dict[str, None] | None:
    """The attributes `gym.Wrapper.__init__` sets besides `env`, when every one is None (so a
    class-level default reads the same); None when the installed Gymnasium sets others."""
    state = {k: v for k, v in vars(gym.Wrapper(_ProbeEnv())).items() if k != "env"}
    return state if all(v is None for v in state.values()) else None


_WRAPPER_DEFAULTS = _wrapper_defaults()


class TextWrapper(gym.Wrapper[Messages, str, Messages, str]):
    """Base wrapper for text envs: forwards the async methods too, so an env's native async
    implementation is kept. Subclasses override `reset`/`step` and `areset`/`astep` alike."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        return await self.env.areset(seed=seed, options=options)  # type: ignore[attr-defined]

    async def astep(self, action: str) -> StepReturn:
        return await self.env.astep(action)  # type: ignore[attr-defined]


class EpisodeGuard(TextWrapper):
    """The episode life cycle around an env.

    - `step` before `reset`, or after the episode ended, raises `ResetNeeded`;
    - every action becomes a valid `str` (bytes decoded, invalid UTF-8 replaced);
    - after `max_turns` steps without the task ending, `truncated` is set
      (`info["truncated_by"] = "max_turns"`);
    - the last step's `info["episode"]` holds return, turns, parse errors, tool calls,
      the end flags and wall time, merged with any metrics the env put there itself.
    """

    # Per-episode state; class-level defaults keep construction (once per episode) cheap.
    _active = False
    _has_reset = False
    _turns = 0
    _return = 0.0
    _parse_errors = 0
    _tool_calls = 0
    _started = 0.0

    def __init__(self, env: gym.Env[Messages, str], max_turns: int | None = None):
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        if _WRAPPER_DEFAULTS is None:
            super().__init__(env)
        elif isinstance(env, gym.Env):
            # gym.Wrapper.__init__'s own state, without its call: its other fields are
            # class-level defaults here (see _wrapper_defaults), set once, not per episode.
            self.env = env
        else:
            raise TypeError(f"Expected env to be a `gymnasium.Env` but got {type(env)}")
        self.max_turns = max_turns

    @property
    def turns(self) -> int:
        """Steps taken in the current episode."""
        return self._turns

    def _begin(self) -> None:
        self._active = self._has_reset = True
        self._turns, self._return, self._parse_errors, self._tool_calls = 0, 0.0, 0, 0
        self._started = perf_counter()

    def _check(self, action: object) -> str:
        if not self._active:
            if not self._has_reset:
                raise ResetNeeded("call reset() before step()")
            raise ResetNeeded("the episode has ended (terminated or truncated): call reset()")
        return coerce_action(action)

    def _after_step(self, result: StepReturn) -> StepReturn:
        messages, reward, terminated, truncated, info = result
        self._turns += 1
        self._return += reward
        if not isinstance(info, dict):  # broken env: left for check_env / the loop to report
            return result
        if info.get(PARSE_ERROR_KEY) is not None:
            self._parse_errors += 1
        # A tuple of types, not `list | tuple`: isinstance on a union is several times slower.
        if isinstance(tool_calls := info.get(TOOL_CALLS_KEY), (list, tuple)) and tool_calls:
            self._tool_calls += len(tool_calls)
        if not (terminated or truncated):
            if self.max_turns is None or self._turns < self.max_turns:
                return result
            truncated = True
            info[TRUNCATED_BY_KEY] = _MAX_TURNS
        self._active = False
        episode = {
            "return": self._return,
            "turns": self._turns,
            "parse_errors": self._parse_errors,
            "tool_calls": self._tool_calls,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "duration_s": perf_counter() - self._started,
        }
        env_metrics = info.get(EPISODE_KEY)
        if env_metrics is None or isinstance(env_metrics, dict):
            # A malformed value is left as it is, for `StepInfo.read` (check_env, the agent
            # loop) to report by name.
            if env_metrics:
                episode.update(env_metrics)
            info[EPISODE_KEY] = episode
        return messages, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        result = self.env.reset(seed=seed, options=options)
        self._begin()
        return result

    def step(self, action: str) -> StepReturn:
        return self._after_step(self.env.step(self._check(action)))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        result = await self.env.areset(seed=seed, options=options)  # type: ignore[attr-defined]
        self._begin()
        return result

    async def astep(self, action: str) -> StepReturn:
        return self._after_step(await self.env.astep(self._check(action)))  # type: ignore[attr-defined]


# EpisodeGuard is built once per episode: gym.Wrapper.__init__'s None fields become class
# attributes, so its constructor only stores `env` (see `EpisodeGuard.__init__`).
for _name in _WRAPPER_DEFAULTS or ():
    setattr(EpisodeGuard, _name, None)
