"""The run's env and its task rows: what `env.id`, `env.kwargs` and `env.tasks` resolve to.

Both the training loop (`trainer.run`, `trainer.loop`) and held-out evaluation
(`trainer.heldout`) build their envs here, so neither imports the other. Group `i` of a run
plays `tasks[cursor.task_index(i)]` when the env has task rows (from `env.tasks`, a path in
`env.kwargs.tasks`, or the env's own), and `seed_task(SeedStream.seed(i))` when it has none
(the Gymnasium way: its state drawn from the seed). `TASK_IDS_FILE` records which, so
`--resume` can refuse a run whose rows changed.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import skyrl_gym
from skyrl_gym.registry import EntryPointError, UnknownEnvError
from skyrl_gym.tasks import TaskError, TaskRow, load_tasks, to_task_rows, validate_task
from skyrl_sdk.trainer.config import ConfigError, TrainConfig

TASK_IDS_FILE = "task_ids.json"
"""In the run directory: which tasks the run trains on (a digest of the task ids, or the seed
stream), so `--resume` can refuse a run whose rows changed."""
TASKS_FIELD = "tasks"
"""The constructor argument that takes an env's task rows."""


def require_env_id(config: TrainConfig) -> str:
    """`env.id`, or a `ConfigError` saying it is missing (it has no default)."""
    if not config.env.id:
        raise ConfigError(
            "env.id: missing: name the env to train on, a registered id (`skyrl env list`) "
            "or an entry point 'module:Class', e.g. env.id=lookup"
        )
    return config.env.id


def read_task_rows(value: Any, field: str) -> list[TaskRow]:
    """Task rows from a JSONL / parquet path or a list of rows, validated once
    (`skyrl_gym.tasks`); a `ConfigError` naming `field` for a bad file or row."""
    try:
        if isinstance(value, str | Path):
            rows = load_tasks(value)
            if not rows:
                raise TaskError(f"{value}: holds no task rows")
        else:
            rows = to_task_rows(enumerate(value), where="row ")
    except TaskError as e:
        raise ConfigError(f"{field}: {e}") from None
    return rows


def resolve_env_kwargs(config: TrainConfig) -> dict[str, Any]:
    """`env.kwargs` as every env of the run gets it: the rows of `env.tasks`, or of a path
    string in `env.kwargs.tasks`, read and validated here, once, as its `tasks`."""
    cfg = config.env
    kwargs = dict(cfg.kwargs)
    if cfg.tasks is not None:
        kwargs[TASKS_FIELD] = read_task_rows(cfg.tasks, "env.tasks")
    elif isinstance(kwargs.get(TASKS_FIELD), str | list | tuple):
        # A path here used to reach the env as a string (a list of characters to a TaskEnv).
        kwargs[TASKS_FIELD] = read_task_rows(kwargs[TASKS_FIELD], "env.kwargs.tasks")
    return kwargs


def tasks_field(config: TrainConfig) -> str | None:
    """The config field the run's task rows are given in (None: the env's own)."""
    if config.env.tasks is not None:
        return "env.tasks"
    if isinstance(config.env.kwargs.get(TASKS_FIELD), str | list | tuple):
        return "env.kwargs.tasks"
    return None


_GYM_DIR = Path(skyrl_gym.__file__).resolve().parent


def _raised_calling(error: BaseException) -> bool:
    """Whether `error` was raised by the call into the env's constructor itself (its
    arguments did not bind), not from inside it: the innermost frame is skyrl_gym's
    `make` (or its SkyRL adapter), not the env's code."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    return path.is_relative_to(_GYM_DIR) and not path.is_relative_to(_GYM_DIR / "envs")


def build_env(
    env_id: str, max_turns: int, kwargs: Mapping[str, Any], field: str = "env.kwargs"
) -> Any:
    """`skyrl_gym.make` for a probe: an env that rejects its arguments (no `tasks`
    parameter, an unknown keyword) is a `ConfigError` naming `field`, not a traceback."""
    try:
        return skyrl_gym.make(env_id, max_turns=max_turns, **kwargs)
    except (UnknownEnvError, EntryPointError) as e:
        raise ConfigError(f"env.id: {e}") from None
    except TypeError as e:
        text = str(e)
        if not _raised_calling(e):
            raise  # the env's own bug: keep the traceback
        if (
            TASKS_FIELD in kwargs
            and field != "env.kwargs"
            and (f"'{TASKS_FIELD}'" in text or "takes no arguments" in text)
        ):
            raise ConfigError(
                f"{field}: env {env_id!r} takes no task rows (its constructor has no "
                f"'{TASKS_FIELD}' argument): it is played by seeds, drop the rows"
            ) from None
        raise ConfigError(f"{field}: env {env_id!r} rejects its arguments ({text})") from None


def probe_tasks(config: TrainConfig, env_kwargs: Mapping[str, Any]) -> list[TaskRow]:
    """The task rows of the run's env (empty: it is played by seeds), from one probe env.

    Rows given in the config are checked against the env's `required_fields`; an env that
    takes rows but has none (a `TaskEnv` without a dataset) is a `ConfigError`, since it
    cannot start an episode from a seed.
    """
    env_id = require_env_id(config)
    given = tasks_field(config)
    field = given or "env.kwargs"
    probe = build_env(env_id, config.env.max_turns, env_kwargs, field)
    try:
        env = probe.unwrapped
        tasks = list(getattr(env, "tasks", None) or ())
        required = tuple(getattr(env, "required_fields", ()))
        if given and required:
            try:
                for row in tasks:
                    validate_task(row, required, f"env {env_id!r}")
            except TaskError as e:
                raise ConfigError(f"{field}: {e}") from None
        if not tasks and hasattr(env, TASKS_FIELD):
            raise ConfigError(
                f"env.tasks: env {env_id!r} plays task rows and has none: give it a JSONL "
                "or parquet file of rows, env.tasks=PATH"
            )
    finally:
        probe.close()
    return tasks


class SeedStream:
    """The seed each group plays when the env has no tasks: group `i`'s is drawn from a
    generator seeded with (run seed, `i`) alone, below `limit` (`heldout.seed_offset`, where
    held-out seeds start), so a resumed run replays every group's seed exactly."""

    def __init__(self, seed: int, limit: int):
        self.run_seed = seed
        """The run's `seed`."""
        self.limit = limit
        """Seeds are in `[0, limit)`."""

    def seed(self, group: int) -> int:
        """The seed of group `group`."""
        return random.Random(f"{self.run_seed}:seed-stream:{group}").randrange(self.limit)


def task_ids_record(tasks: Sequence[TaskRow], seeds: SeedStream | None) -> dict[str, Any]:
    """What `TASK_IDS_FILE` holds: the task ids' digest (in order), or the seed stream."""
    if seeds is not None:
        return {
            "description": f"seeds below {seeds.limit} drawn with run seed {seeds.run_seed}",
            "seeds": [seeds.run_seed, seeds.limit],
        }
    digest = hashlib.sha256("\n".join(str(t.get("task_id", "")) for t in tasks).encode())
    return {
        "description": f"{len(tasks)} tasks, ids digest {digest.hexdigest()[:12]}",
        "tasks": len(tasks),
        "sha256": digest.hexdigest(),
    }


def make_env(config: TrainConfig, kwargs: Mapping[str, Any] | None = None) -> Any:
    """A fresh env of the run (`config.env`), as every episode gets; `kwargs` replaces
    `env.kwargs` (the loop passes its `env_kwargs`, with the task rows read once)."""
    cfg = config.env
    env_id = require_env_id(config)
    return skyrl_gym.make(
        env_id, max_turns=cfg.max_turns, **(cfg.kwargs if kwargs is None else kwargs)
    )
