"""What plays an episode, and what it plays: the `Agent` and `PlayableEnv` protocols.

An `Agent` plays one episode of a `PlayableEnv` on one task row and returns its `Trajectory`,
never raising for an episode's failures (they end it with a `StopReason`):

    trajectory = await agent.play(env, task, episode_id="t1#0", env_id="math")

There are two: the loop agent (`skyrl_sdk.agents.rollout.LoopAgent`: a `Policy` and our chat
loop, `rollout`) and the command agent (`skyrl_sdk.agents.command_agent.CommandAgentRunner`:
an external program that talks to a model server over the OpenAI API). Every runner of many
episodes (`skyrl_sdk.agents.rollout.run_episodes`: eval, held-out evaluation, ...) takes an
`Agent`, so none of them asks which kind it has.

A `PlayableEnv` is what the agents play: a text env with the async half of the Gymnasium API
(`areset`, `astep`) and `close`, e.g. what `skyrl_gym.make` returns or a Ray env lease
(`skyrl_sdk.trainer.ray_envs.RayEnv`). Only the agents package calls `areset`/`astep`; code
elsewhere that must drive an env by hand (an env actor hosting envs for a driver's agents)
goes through `reset_env`/`step_env`. `close_env` is the one way a runner closes an env.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol, runtime_checkable

from skyrl_gym.core import Messages, StepReturn, TextEnv
from skyrl_gym.tasks import TaskRow
from skyrl_gym.wrappers import EpisodeGuard
from skyrl_sdk.agents.trajectory import Trajectory

log = logging.getLogger(__name__)


class PlayableEnv(Protocol):
    """A wrapped text env as the agents play it: async reset and step, and close."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        """Start an episode (`options={"task": row}` picks the task, else `seed` does)."""
        ...

    async def astep(self, action: str) -> StepReturn:
        """Apply the assistant's reply: (new messages, reward, terminated, truncated, info)."""
        ...

    def close(self) -> object:
        """Release the env (may return an awaitable; safe to call more than once)."""
        ...


@runtime_checkable
class Agent(Protocol):
    """Plays one episode of an env on a task row (see the module docstring)."""

    @property
    def name(self) -> str:
        """Recorded as each trajectory's `policy` (e.g. the policy's name)."""
        ...

    async def play(
        self,
        env: PlayableEnv,
        task: TaskRow,
        *,
        episode_id: str | None = None,
        env_id: str = "",
    ) -> Trajectory:
        """Play one episode of `env` on `task`; never raises for episode failures. The env
        is not closed here: whoever made it closes it (`close_env`)."""
        ...


async def reset_env(
    env: PlayableEnv, *, seed: int | None = None, options: dict[str, Any] | None = None
) -> tuple[Messages, dict[str, Any]]:
    """`env.areset(...)`, for code outside the agents that hosts envs for them (an env actor
    serving a driver's agents): only the agents package plays envs."""
    return await env.areset(seed=seed, options=options)


async def step_env(env: PlayableEnv, action: str) -> StepReturn:
    """`env.astep(action)`, for code outside the agents that hosts envs for them."""
    return await env.astep(action)


async def close_env(env: PlayableEnv) -> None:
    """Close an env after its episode, the one way every runner does; never raises (a
    failing close must not lose the finished trajectory).

    An env whose steps are declared cheap (`inline_async`, on it or the env it wraps) closes
    on the event loop; any other may block (a sandbox to tear down), so it closes in a
    worker thread, as its steps run. A `close` that returns an awaitable is awaited.
    """
    rest = start_close(env)
    if rest is not None:
        await rest


def start_close(env: PlayableEnv) -> Coroutine[Any, Any, None] | None:
    """`close_env`, split for a caller that closes many cheap envs: an env whose steps are
    declared cheap is closed right here (None comes back, nothing to await, no coroutine
    built); otherwise the coroutine that finishes closing it (await it). Never raises."""
    try:
        # What `make` returns (a guard around the env itself) without gymnasium's
        # `unwrapped` property chain: one episode closes one env.
        inner = env.env if type(env) is EpisodeGuard else env
        if not isinstance(inner, TextEnv):
            inner = getattr(inner, "unwrapped", inner)
        if getattr(inner, "inline_async", False) is not True:
            return _close_in_thread(env)
        closing = env.close()
        if closing is not None and inspect.isawaitable(closing):
            return _await_close(env, closing)
    except Exception as e:  # the episode is over: its trajectory is what counts
        _close_failed(env, e)
    return None


async def _close_in_thread(env: PlayableEnv) -> None:
    try:
        closing = await asyncio.to_thread(env.close)
        if closing is not None and inspect.isawaitable(closing):
            await closing
    except Exception as e:
        _close_failed(env, e)


async def _await_close(env: PlayableEnv, closing: Awaitable[object]) -> None:
    try:
        await closing
    except Exception as e:
        _close_failed(env, e)


def _close_failed(env: PlayableEnv, e: Exception) -> None:
    # Said, not raised: a close that keeps failing (a sandbox not torn down) must show.
    log.warning("closing %s failed: %s: %s", type(env).__name__, type(e).__name__, e)
