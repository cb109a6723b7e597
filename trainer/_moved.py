"""The deprecation warning of a module that moved (issue 26): its old path stays importable for
one release as a thin alias that re-exports the new module and calls `warn_moved` once. A name
that moved out of a module that stays (`NAME_MOVES`) is served by that module's `__getattr__`
through `moved_name`, which warns on every use of the old path.

The warning is attributed to the code that imported the old path (or to `__main__` when the old
path is run with `python -m`), so Python's default filters show it to that code's author.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from typing import Any

REMOVED_IN = "the release after 0.1"
"""When the old paths go."""


@dataclass(frozen=True)
class Move:
    """One module's move."""

    old: str
    """The deprecated import path, e.g. `skyrl_sdk.trainer.demo`."""
    new: str
    """Where it lives now, e.g. `skyrl_sdk.trainer.demos.lookup`."""


MOVES: tuple[Move, ...] = (
    Move("skyrl_sdk.trainer.demo", "skyrl_sdk.trainer.demos.lookup"),
    Move("skyrl_sdk.trainer.demo_cli", "skyrl_sdk.trainer.demos.cli"),
    Move("skyrl_sdk.trainer.demo_report", "skyrl_sdk.trainer.demos.report"),
    Move("skyrl_sdk.trainer.terminal_demo", "skyrl_sdk.trainer.demos.terminal"),
    Move("skyrl_sdk.trainer.gpu_check", "skyrl_sdk.trainer.selfcheck.gpu"),
    Move("skyrl_sdk.trainer.distributed_smoke", "skyrl_sdk.trainer.selfcheck.distributed"),
    Move("skyrl_sdk.trainer.lookup_env", "skyrl_gym.envs.lookup"),
)
"""Every deprecated alias in this package, old -> new (the tests import each one)."""


def warn_moved(old: str, *, as_main: bool = False) -> None:
    """Emit the `DeprecationWarning` for importing (or running, `as_main`) the old path `old`."""
    move = next(m for m in MOVES if m.old == old)
    warnings.warn(
        f"`{move.old}` moved to `{move.new}`; import it from there "
        f"(the old path is removed in {REMOVED_IN})",
        DeprecationWarning,
        # 1: this call; 2: the alias module (`__main__` under `python -m`); 3: its importer.
        stacklevel=2 if as_main else 3,
    )


_LOOP = "skyrl_sdk.trainer.loop"
_ASYNC = "skyrl_sdk.trainer.async_trainer"
_RAY = "skyrl_sdk.trainer.ray_mode"
_TINKER = "skyrl_sdk.trainer.tinker_trainer"
_BATCH = "skyrl_sdk.trainer.batch"
_BASE = "skyrl_sdk.trainer.backends.base"
_RUN = "skyrl_sdk.trainer.run"
_RUN_ENV = "skyrl_sdk.trainer.run_env"


@dataclass(frozen=True)
class NameMove:
    """One name that moved out of a module that stays (backends by composition, issue 26)."""

    old: str
    """The module it was imported from, e.g. `skyrl_sdk.trainer.async_trainer`."""
    name: str
    """The name, e.g. `pick_batch`."""
    new: str
    """The module it lives in now, e.g. `skyrl_sdk.trainer.batch`."""


def _names(old: str, new: str, names: str) -> tuple[NameMove, ...]:
    return tuple(NameMove(old, name, new) for name in names.split())


NAME_MOVES: tuple[NameMove, ...] = (
    # `loop` still imports Group, build_batch, flat_groups, step_metrics, RunOutcome,
    # rollout_limits and make_env for its own use: those resolve there without a warning.
    *_names(_LOOP, _BATCH, "pick_batch"),
    *_names(_LOOP, _BASE, "PolicyEngine PolicyLearner"),
    *_names(_LOOP, _RUN, "open_run_outputs sampling_params seed_everything"),
    *_names(
        _LOOP,
        _RUN_ENV,
        "TASKS_FIELD TASK_IDS_FILE SeedStream build_env probe_tasks read_task_rows "
        "require_env_id resolve_env_kwargs task_ids_record tasks_field",
    ),
    *_names(_ASYNC, _LOOP, "SeededPolicy TrainResult"),
    *_names(_ASYNC, _BATCH, "Group build_batch pick_batch step_metrics"),
    *_names(_ASYNC, _RUN, "open_run_outputs rollout_limits sampling_params seed_everything"),
    *_names(_ASYNC, _RUN_ENV, "make_env"),
    *_names(_ASYNC, "skyrl_sdk.trainer.backends.local", "ENGINE_MODEL_DIR build_engine"),
    *_names(
        _RAY,
        "skyrl_sdk.trainer.backends.ray",
        "SETUP_TIMEOUT_S EngineActor LearnerActor LearnerRankActor RayDataParallelLearner "
        "RayEngine RayLearner init_local_ray",
    ),
    *_names(
        _TINKER,
        "skyrl_sdk.trainer.backends.tinker",
        "CHECKPOINT_LOG CONNECT_TIMEOUT_S LOOPBACK_HOSTS MiniBatchResult SamplerWeights "
        "TinkerEngine TinkerLearner build_datums check_config reduction_weights",
    ),
)
"""Every name that moved out of a module that stays; the old module still serves it."""


def moved_name(old: str, name: str) -> Any:
    """`old.name` from the module it moved to, with a `DeprecationWarning` attributed to the
    code that used the old path (call it from `old`'s module `__getattr__`); AttributeError
    for a name that never was there."""
    move = next((m for m in NAME_MOVES if m.old == old and m.name == name), None)
    if move is None:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    warnings.warn(
        f"`{old}.{name}` moved to `{move.new}.{name}`; import it from there "
        f"(the old path is removed in {REMOVED_IN})",
        DeprecationWarning,
        # 1: this call; 2: the module's __getattr__; 3: the code that asked for the name.
        stacklevel=3,
    )
    return getattr(importlib.import_module(move.new), name)
