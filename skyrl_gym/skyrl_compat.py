"""Run envs written for SkyRL's `skyrl-gym` as Gymnasium-faithful `TextEnv`s.

A SkyRL env (a subclass of `skyrl_gym.envs.base_text_env.Env`, usually `BaseTextEnv`) plays
one episode per instance: SkyRL's generator builds it with `make(id, env_config=...,
extras=row_extras)`, calls `init(prompt)` and then `step(text)` until the returned dict says
`done`. `SkyRLTextEnv` is that loop as a `TaskEnv`:

- `reset(options={"task": row})` (or a seeded draw from `tasks`) builds a fresh instance with
  `extras` = the row without `prompt`/`env_class`/`task_id`, plus the make-time `extras`,
  plus `max_turns` (as SkyRL's generator injects it), then returns `init(prompt)`'s messages;
- `step` turns the dict into Gymnasium's 5-tuple: `done` is `terminated`, `metadata` goes to
  `info["metadata"]`, `postprocessed_action` to `info["postprocessed_action"]`, and on the last
  step `get_metrics()` to `info["episode"]`;
- the instance is closed when the episode ends, on the next reset and on `close`;
- a row whose `env_class` is registered to another env is refused (SkyRL would play it
  there); an `env_class` nobody registered is ignored.

`skyrl_gym.make` applies it by itself: this module plugs `SKYRL_ADAPTER` into the registry
(`add_env_adapter`, when `skyrl_gym` is imported), which turns an entry point that is a SkyRL
env class into a `SkyRLFactory`, so `register(id=..., entry_point="mod:MyEnv")` and
`make(id, env_config=..., extras=...)` work as in SkyRL, while our own envs are untouched.
The dependency points one way: this module imports the registry, the registry knows nothing
of SkyRL.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, TaskEnv
from skyrl_gym.envs.base_text_env import Env as SkyRLEnv
from skyrl_gym.registry import EntryPointError, add_env_adapter, registry
from skyrl_gym.tasks import (
    SKYRL_ENV_CLASS_KEY,
    TaskError,
    TaskRow,
    load_tasks,
    skyrl_row_parts,
    to_task_rows,
)

__all__ = [
    "SKYRL_ADAPTER",
    "EnvConfig",
    "SkyRLAdapter",
    "SkyRLFactory",
    "SkyRLStepError",
    "SkyRLTextEnv",
    "adapt_factory",
    "is_skyrl_env_class",
]

STEP_KEYS = ("observations", "reward", "done")
"""The keys a SkyRL `step` result must have."""


class SkyRLStepError(TypeError):
    """A SkyRL env's `init` or `step` returned something outside SkyRL's contract."""


class EnvConfig(dict):
    """A dict whose keys also read as attributes, like the OmegaConf `DictConfig` SkyRL passes
    as `env_config` (`env_config.db_path` and `env_config.get("db_path")` both work)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"env_config has no field {name!r}") from None

    @classmethod
    def of(cls, value: Any) -> Any:
        """Plain dicts (nested too) become `EnvConfig`; None becomes an empty one; any other
        mapping (e.g. a real `DictConfig`) is passed through as it is."""
        if value is None:
            return cls()
        if type(value) is dict:
            return cls({k: cls.of(v) if type(v) is dict else v for k, v in value.items()})
        return value


def is_skyrl_env_class(obj: object) -> bool:
    """True for a class that subclasses SkyRL's `Env` (hence `BaseTextEnv` subclasses)."""
    return isinstance(obj, type) and issubclass(obj, SkyRLEnv)


def adapt_factory(factory: Callable[..., Any]) -> Callable[..., Any]:
    """The entry point `make` should call: a `SkyRLFactory` for a SkyRL env class, else
    `factory` itself (our own envs are built exactly as before)."""
    return SkyRLFactory(factory) if is_skyrl_env_class(factory) else factory


@dataclass(frozen=True)
class SkyRLFactory:
    """Builds a `SkyRLTextEnv` around a SkyRL env class (or a function returning one)."""

    env_factory: Callable[..., Any]
    """The SkyRL entry point, called as `env_factory(env_config=..., extras=..., **kwargs)`
    once per episode."""

    def __call__(
        self,
        *,
        tasks: str | Path | Sequence[TaskRow] | None = None,
        max_turns: int | None = None,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> SkyRLTextEnv:
        return SkyRLTextEnv(
            self.env_factory,
            tasks=tasks,
            max_turns=max_turns,
            env_config=env_config,
            extras=extras,
            **kwargs,
        )


class SkyRLTextEnv(TaskEnv):
    """A SkyRL env as a Gymnasium `TextEnv`: one fresh SkyRL instance per episode."""

    def __init__(
        self,
        env_factory: Callable[..., Any],
        *,
        tasks: str | Path | Sequence[TaskRow] | None = None,
        max_turns: int | None = None,
        env_config: Any = None,
        extras: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        """`tasks`: the dataset (a JSONL/parquet path or rows, SkyRL rows accepted) that
        seeded resets draw from; `max_turns`: put in every episode's `extras`; `env_config`,
        `extras` and `kwargs`: passed to the SkyRL constructor, as SkyRL's `make` does."""
        if isinstance(tasks, str | Path):
            rows: Sequence[TaskRow] = load_tasks(tasks)
        elif tasks is None:
            rows = ()
        else:
            rows = to_task_rows(enumerate(tasks), where="tasks row ")
        super().__init__(rows)
        self.env_factory = env_factory
        self.env_config = EnvConfig.of(env_config)
        self.extras: dict[str, Any] = dict(extras or {})
        self.max_turns = max_turns
        self.kwargs = kwargs
        self.skyrl_env: Any = None
        """The SkyRL instance playing the current episode (None between episodes)."""
        self._init_metadata: dict[str, Any] = {}
        self._env_classes: set[str] = set()  # row env_class values already checked

    @property
    def env_name(self) -> str:
        """The SkyRL class (or factory) name, for error messages."""
        return getattr(self.env_factory, "__name__", type(self.env_factory).__name__)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        messages, info = super().reset(seed=seed, options=options)
        if self._init_metadata:
            info["metadata"] = self._init_metadata
        return messages, info

    def choose_task(self, options: dict[str, Any] | None) -> TaskRow:
        if not self.tasks and not (options and "task" in options):
            raise ValueError(
                f"SkyRL env {self.env_name} has no dataset: give it SkyRL rows (tasks=FILE or "
                "rows; --tasks FILE on the command line) or reset(options={'task': row})"
            )
        return super().choose_task(options)

    def start(self, task: TaskRow) -> Messages:
        """Build a SkyRL instance for `task` and return `init(prompt)`'s conversation."""
        self._close_episode()
        if (env_class := task.get(SKYRL_ENV_CLASS_KEY)) and env_class not in self._env_classes:
            self._check_env_class(task, env_class)
        prompt, row_extras = skyrl_row_parts(task)
        extras = copy.deepcopy({**self.extras, **row_extras})
        if self.max_turns is not None:
            extras["max_turns"] = self.max_turns  # what SkyRL's generator does
        env = self.env_factory(env_config=self.env_config, extras=extras, **self.kwargs)
        if not isinstance(env, SkyRLEnv):
            raise SkyRLStepError(
                f"{self.env_name} returned {type(env).__name__}, not a SkyRL Env "
                "(subclass skyrl_gym.envs.base_text_env.BaseTextEnv)"
            )
        self.skyrl_env = env
        result = env.init(copy.deepcopy(prompt))
        if not isinstance(result, tuple) or len(result) != 2:
            raise SkyRLStepError(
                f"{self.env_name}.init() must return (conversation, metadata), "
                f"got {type(result).__name__}"
            )
        messages, metadata = result
        self._init_metadata = metadata if isinstance(metadata, dict) else {}
        if not isinstance(messages, list):
            raise SkyRLStepError(
                f"{self.env_name}.init() must return a list of chat messages first, "
                f"got {type(messages).__name__}"
            )
        return list(messages)

    def step(self, action: str) -> StepReturn:
        env = self.skyrl_env
        if env is None:
            raise ResetNeeded("call reset() before step() (the SkyRL episode is not running)")
        out = env.step(action)
        if not isinstance(out, Mapping) or any(k not in out for k in STEP_KEYS):
            got = sorted(out) if isinstance(out, Mapping) else type(out).__name__
            raise SkyRLStepError(
                f"{self.env_name}.step() must return a dict with observations, reward and done "
                f"(SkyRL's BaseTextEnvStepOutput), got {got}"
            )
        observations = out["observations"]
        if observations is None:
            observations = []
        elif not isinstance(observations, list | tuple):
            raise SkyRLStepError(
                f"{self.env_name}.step() 'observations' must be a list of chat messages, "
                f"got {type(observations).__name__}"
            )
        reward = out["reward"]
        try:
            reward = float(reward)
        except (TypeError, ValueError):
            raise SkyRLStepError(
                f"{self.env_name}.step() 'reward' must be a number, got {reward!r:.100}"
            ) from None
        done = bool(out["done"])
        info: dict[str, Any] = {}
        if metadata := out.get("metadata"):
            info["metadata"] = metadata
        if (rewritten := out.get("postprocessed_action")) is not None:
            info["postprocessed_action"] = rewritten
        if done:
            metrics = env.get_metrics() if hasattr(env, "get_metrics") else None
            if metrics:
                info["episode"] = dict(metrics)
            self._close_episode()
        return list(observations), reward, done, False, info

    def _check_env_class(self, task: TaskRow, env_class: str) -> None:
        """Refuse a row whose `env_class` is registered to a different env: SkyRL would play
        it there, so playing it here would score it by the wrong rules."""
        other = registry.get(env_class)
        if other is not None:
            try:
                factory = other.load()
            except EntryPointError:
                factory = None
            if factory is not self.env_factory:
                raise TaskError(
                    f"task {task.get('task_id')!r} has env_class {env_class!r}, registered to "
                    f"{other.entry_point!r}, not to this env ({self.env_name}): one run plays one "
                    "env, so split the dataset by env_class"
                )
        self._env_classes.add(env_class)

    def _close_episode(self) -> None:
        env, self.skyrl_env = self.skyrl_env, None
        if env is not None:
            env.close()

    def close(self) -> None:
        """Close the running SkyRL instance, if any; safe to call again."""
        self._close_episode()


@dataclass(frozen=True)
class SkyRLAdapter:
    """SkyRL's env contract as a registry `EnvAdapter`: what `make` builds SkyRL envs with."""

    def adapt(self, factory: Callable[..., Any]) -> SkyRLFactory | None:
        """A `SkyRLFactory` for a SkyRL env class, else None (our own envs are untouched)."""
        return SkyRLFactory(factory) if is_skyrl_env_class(factory) else None

    def adapt_built(self, env: object, factory: Callable[..., Any]) -> SkyRLFactory | None:
        """A function that returned a SkyRL env: close that one, build one per episode."""
        if not isinstance(env, SkyRLEnv):
            return None
        env.close()
        return SkyRLFactory(factory)


SKYRL_ADAPTER = SkyRLAdapter()
"""The adapter this module plugs into `skyrl_gym.make` on import."""
add_env_adapter(SKYRL_ADAPTER)
