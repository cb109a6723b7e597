"""Env workers as Ray actors: every episode's env lives in an `EnvActor`, not on the driver.

`EnvPool.make()` leases one env to one episode: it picks an actor round robin and returns a
`RayEnv`, a driver-side handle that is a `skyrl_sdk.agents.agent.PlayableEnv` (`rollout`
awaits `areset(options=...)` and `astep(text)`; the runner calls `close()`). The env itself
is built in the actor on the first `areset`, steps there (the actor drives it through
`skyrl_sdk.agents.agent.reset_env`/`step_env`: only the agents package plays envs), and is
dropped by `close()`; the actor is an async actor, so the episodes leased to it run
concurrently (blocking envs step in its worker threads, as `TextEnv.astep` does locally).

Errors look as they do in one process: an exception raised by the env in the actor is
re-raised on the driver as the env's own exception (not Ray's wrapper), so `rollout` ends the
episode with `StopReason.ENV_ERROR` and the message `step: ValueError: ...`. Only `close()`
differs: it returns at once (the actor closes the env in the background), so an error in an
env's `close` is counted by the actor (`EnvActor.stats`) instead of raised.

The env is sent as its resolved `EnvSpec` (entry point and default kwargs), so envs
registered on the driver at run time, even with a callable entry point, build in the actors.
Actors ask for `num_cpus=0` (see `trainer.ray_mode`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import ray

import skyrl_gym
from skyrl_gym.core import StepReturn
from skyrl_gym.registry import EnvSpec
from skyrl_sdk.agents.agent import PlayableEnv, reset_env, step_env

T = TypeVar("T")


@dataclass(frozen=True)
class EnvActorStats:
    """What one env actor has hosted so far."""

    pid: int
    """The actor's process id."""
    made: int
    """Envs built (one per leased episode)."""
    open: int
    """Envs built and not yet closed."""
    close_errors: int
    """Env `close()` calls that raised (logged here, not raised on the driver)."""


@ray.remote(num_cpus=0)
class EnvActor:
    """Hosts the envs of the episodes leased to it, keyed by lease id."""

    def __init__(self, spec: EnvSpec, max_turns: int | None, kwargs: Mapping[str, Any]):
        self.spec = spec
        self.max_turns = max_turns
        self.kwargs = dict(kwargs)
        self.envs: dict[int, PlayableEnv] = {}
        self.made = 0
        self.close_errors = 0
        # Build (and drop) one env now, so a broken env fails the pool's start, not episodes.
        self._make().close()

    def _make(self) -> PlayableEnv:
        return skyrl_gym.make(self.spec, max_turns=self.max_turns, **self.kwargs)

    async def reset(
        self, key: int, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Any, dict[str, Any]]:
        env = self.envs.get(key)
        if env is None:
            env = self.envs[key] = self._make()
            self.made += 1
        return await reset_env(env, seed=seed, options=options)

    async def step(self, key: int, action: str) -> StepReturn:
        env = self.envs.get(key)
        if env is None:
            raise RuntimeError(f"env lease {key} is not open (reset first, or already closed)")
        return await step_env(env, action)

    async def close(self, key: int) -> None:
        env = self.envs.pop(key, None)
        if env is None:
            return
        try:
            env.close()
        except Exception:
            self.close_errors += 1

    async def stats(self) -> EnvActorStats:
        return EnvActorStats(os.getpid(), self.made, len(self.envs), self.close_errors)


async def _unwrapped(ref: Awaitable[T]) -> T:
    """Await an actor call; an exception raised in the actor is re-raised as itself."""
    try:
        return await ref
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


class RayEnv:
    """One episode's env, living in an `EnvActor` (the async env API `rollout` uses)."""

    def __init__(self, actor: Any, key: int):
        self.actor = actor
        """The `EnvActor` that hosts this env."""
        self.key = key
        """The lease id of this env inside its actor."""
        self._closed = False

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Build the env in the actor (first call) and reset it there."""
        return await _unwrapped(self.actor.reset.remote(self.key, seed, options))

    async def astep(self, action: str) -> StepReturn:
        """Step the env in the actor."""
        return await _unwrapped(self.actor.step.remote(self.key, action))

    def close(self) -> None:
        """Drop the env in the actor (returns at once; safe to call more than once)."""
        if not self._closed:
            self._closed = True
            self.actor.close.remote(self.key)


class EnvPool:
    """A few `EnvActor`s; each episode's env goes to the next one, round robin."""

    def __init__(self, actors: Sequence[Any]):
        if not actors:
            raise ValueError("an env pool needs at least one actor")
        self.actors = list(actors)
        """The env actors."""
        self._next = itertools.cycle(self.actors)
        self._keys = itertools.count()

    @classmethod
    def start(
        cls,
        env_id: str,
        *,
        size: int,
        max_turns: int | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> EnvPool:
        """Start `size` actors for the registered env `env_id`; raises (the env's own
        error) if the env cannot be built in them."""
        spec = skyrl_gym.spec(env_id)
        actors = [EnvActor.remote(spec, max_turns, dict(kwargs or {})) for _ in range(size)]
        pool = cls(actors)
        try:
            pool.stats()
        except ray.exceptions.RayActorError as e:
            pool.close()
            # The message ends with the env's own error, after the actor's traceback.
            lines = [line for line in str(e).splitlines() if line.strip()]
            reason = lines[-1].strip() if lines else type(e).__name__
            raise RuntimeError(
                f"env {env_id!r} could not be built in an env actor: {reason}"
            ) from e
        return pool

    def make(self) -> RayEnv:
        """Lease an env for one episode (built in its actor on the first `areset`)."""
        return RayEnv(next(self._next), next(self._keys))

    def stats(self) -> list[EnvActorStats]:
        """Every actor's `EnvActorStats` (blocking)."""
        return ray.get([a.stats.remote() for a in self.actors])

    def close(self) -> None:
        """Stop the actors (their envs are dropped with them)."""
        for actor in self.actors:
            ray.kill(actor)
