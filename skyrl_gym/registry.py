"""The env registry: `register` an id with a lazy `"module:Class"` entry point, `make` it.

`make` builds the env and wraps it in `EpisodeGuard`: no step before reset or after the end,
the turn limit (sets `truncated`), valid-`str` actions, and a summary in `info["episode"]`.

Envs written for SkyRL's `skyrl-gym` register and make the SkyRL way too:
`register(id=..., entry_point=..., kwargs={...})` and `make(id, env_config=..., extras=...)`.
`make` knows no foreign contract itself: `skyrl_gym.skyrl_compat` plugs SkyRL's in with
`add_env_adapter` (an `EnvAdapter` that wraps a SkyRL env class in `SkyRLTextEnv`), so this
module imports nothing of it and the dependency points one way.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import gymnasium as gym

from skyrl_gym.core import TextEnv
from skyrl_gym.wrappers import EpisodeGuard

EnvFactory = Callable[..., TextEnv]


class RegistrationError(ValueError):
    """An env id is registered twice with different specs, or an id is malformed."""


class UnknownEnvError(KeyError):
    """`make`/`spec` was given an id that is not registered."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


class EntryPointError(ImportError):
    """An entry point could not be imported or does not build a `TextEnv`."""


@dataclass(frozen=True)
class EnvSpec:
    """How to build one registered env."""

    id: str
    """The registry id, e.g. `"math"`."""
    entry_point: str | EnvFactory
    """`"package.module:ClassName"` (imported on first `make`) or a callable returning the env."""
    description: str = ""
    """One line shown by `skyrl env list`."""
    max_turns: int | None = None
    """Default turn limit applied by `make` (None: no limit beyond the env's own)."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Default constructor arguments; `make(id, **kwargs)` overrides them."""
    guard: bool = True
    """Wrap in `EpisodeGuard` (order enforcement, turn limit, episode stats); False returns
    the bare env, for envs that manage their own episodes."""

    def load(self) -> EnvFactory:
        """Import and return the entry point, with an error naming what failed."""
        if callable(self.entry_point):
            return self.entry_point
        module_name, sep, attr = self.entry_point.partition(":")
        if not sep or not module_name or not attr:
            raise EntryPointError(
                f"env {self.id!r}: entry point {self.entry_point!r} is not of the form 'module:Class'"
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise EntryPointError(
                f"env {self.id!r}: cannot import module {module_name!r} ({type(e).__name__}: {e})"
            ) from e
        try:
            factory = getattr(module, attr)
        except AttributeError:
            raise EntryPointError(
                f"env {self.id!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
        if not callable(factory):
            raise EntryPointError(f"env {self.id!r}: {self.entry_point!r} is not callable")
        return factory


_registry: dict[str, EnvSpec] = {}
_factories: dict[str | EnvFactory, EnvFactory] = {}  # imported entry points, so make() imports once
_text_env_types: set[type] = set()  # classes make() has already seen to be TextEnvs
registry: Mapping[str, EnvSpec] = MappingProxyType(_registry)
"""Read-only view of every registered env, by id."""


class EnvAdapter(Protocol):
    """A foreign env contract plugged into `make` (SkyRL's, by `skyrl_gym.skyrl_compat`)."""

    def adapt(self, factory: Callable[..., Any]) -> EnvFactory | None:
        """A factory of `TextEnv`s for an entry point of this contract, else None."""

    def adapt_built(self, env: object, factory: Callable[..., Any]) -> EnvFactory | None:
        """For an entry point that built `env`, not a `TextEnv`: if `env` is of this contract,
        close it and return a factory of `TextEnv`s around `factory`; else None."""


_adapters: list[EnvAdapter] = []
# Entry points an adapter wrapped: the adapted factory also receives the spec's turn limit as
# `max_turns` (a foreign contract reads it at construction, as SkyRL's generator injects it).
_adapted: set[str | EnvFactory] = set()


def add_env_adapter(adapter: EnvAdapter) -> None:
    """Plug a foreign env contract into `make`; adding the same adapter again is a no-op."""
    if adapter not in _adapters:
        _adapters.append(adapter)
        _factories.clear()  # entry points imported before it was known are adapted anew


def _adapt(entry_point: str | EnvFactory, factory: Callable[..., Any]) -> EnvFactory:
    for adapter in _adapters:
        adapted = adapter.adapt(factory)
        if adapted is not None:
            _adapted.add(entry_point)
            return adapted
    return factory


def register(
    id: str,
    entry_point: str | EnvFactory,
    *,
    description: str = "",
    max_turns: int | None = None,
    guard: bool = True,
    **kwargs: Any,
) -> EnvSpec:
    """Register an env id. Registering the same spec twice is a no-op; a different one raises.

    Keyword arguments are the env's constructor defaults; SkyRL's spelling, one dict given as
    `kwargs={...}`, means the same.
    """
    if "kwargs" in kwargs and isinstance(kwargs["kwargs"], Mapping | None):
        kwargs = {**(kwargs.pop("kwargs") or {}), **kwargs}
    if not isinstance(id, str) or not id or any(c.isspace() for c in id):
        raise RegistrationError(f"env id must be a non-empty string without spaces, got {id!r}")
    new = EnvSpec(id, entry_point, description, max_turns, dict(kwargs), guard)
    old = _registry.get(id)
    if old is not None and old != new:
        raise RegistrationError(
            f"env {id!r} is already registered with entry point {old.entry_point!r}; "
            "call deregister() first to replace it"
        )
    _registry[id] = new
    return new


def deregister(id: str) -> None:
    """Remove an env id (no error if it is absent)."""
    _registry.pop(id, None)


def spec(id: str) -> EnvSpec:
    """The spec of a registered id, or `UnknownEnvError` with close matches."""
    try:
        return _registry[id]
    except KeyError:
        close = difflib.get_close_matches(str(id), list(_registry), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        known = ", ".join(sorted(_registry)) or "none"
        raise UnknownEnvError(f"no env registered as {id!r}.{hint} Registered: {known}") from None


def resolve(env_ref: str, *, imports: Sequence[str] = (), from_cwd: bool = False) -> EnvSpec:
    """The spec for a registered id or a `"module:Class"` entry point, ready for `make`.

    `imports` are modules imported first, so their `register()` calls run (a command line's
    `--import`). An unregistered `"module:Class"` is imported now (an `EntryPointError` names
    what failed) and registered under that same string, so `make(env_ref)` and every process
    that sends the spec along build it. `from_cwd` puts the current directory on `sys.path`
    first, as `python -m` does, so a command line finds the user's own modules.
    """
    if from_cwd and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module_name in imports:
        try:
            importlib.import_module(module_name)
        except ImportError as e:
            raise EntryPointError(
                f"cannot import module {module_name!r} ({type(e).__name__}: {e})"
            ) from e
    known = _registry.get(env_ref)
    if known is not None:
        return known
    if ":" in env_ref:
        EnvSpec(env_ref, env_ref).load()  # fail now, naming the module or attribute
        return register(env_ref, env_ref)
    return spec(env_ref)


def make(id: str | EnvSpec, *, max_turns: int | None = None, **kwargs: Any) -> gym.Env:
    """Build a registered env wrapped in `EpisodeGuard` (order, turn limit, episode stats).

    `max_turns` overrides the spec's default; other keyword arguments override the spec's
    constructor defaults. An env whose constructor takes `max_turns` receives the limit too
    (so it can tell the model how many turns are left); the guard enforces it either way.
    """
    env_spec = id if isinstance(id, EnvSpec) else (_registry.get(id) or spec(id))
    factory = _factories.get(env_spec.entry_point)
    if factory is None:
        entry_point = env_spec.entry_point
        factory = _factories[entry_point] = _adapt(entry_point, env_spec.load())
    turns = max_turns if max_turns is not None else env_spec.max_turns
    if max_turns is None and turns is not None and env_spec.entry_point in _adapted:
        max_turns = turns  # e.g. a SkyRL env reads its turn limit from extras["max_turns"]
    if kwargs or (max_turns is not None and _takes_max_turns(factory)):
        kwargs = {**env_spec.kwargs, **kwargs}
        if max_turns is not None and _takes_max_turns(factory):
            kwargs["max_turns"] = max_turns
    else:
        kwargs = env_spec.kwargs  # the common case: no copy
    env = factory(**kwargs)
    if type(env) not in _text_env_types and not isinstance(env, TextEnv):
        for adapter in _adapters:  # e.g. a function returning a SkyRL env: one per episode
            rebuilt = adapter.adapt_built(env, factory)
            if rebuilt is not None:
                _adapted.add(rebuilt)
                kwargs = {k: v for k, v in kwargs.items() if k != "max_turns"}
                adapted_spec = EnvSpec(env_spec.id, rebuilt, guard=env_spec.guard)
                return make(adapted_spec, max_turns=turns, **kwargs)
        raise EntryPointError(
            f"env {env_spec.id!r}: entry point returned {type(env).__name__}, not a TextEnv"
        )
    _text_env_types.add(type(env))  # later makes skip the (ABC) isinstance check
    if not env_spec.guard:
        return env
    return EpisodeGuard(env, turns)


@functools.cache
def _takes_max_turns(factory: EnvFactory) -> bool:
    try:
        return "max_turns" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
