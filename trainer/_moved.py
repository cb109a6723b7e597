"""What moved in the trainer (issue 26), for `skyrl_sdk.moved`: each old module is a thin
alias that re-exports the new one and calls `warn_moved`; a name that moved out of a module
that stays (`NAME_MOVES`) is served by that module's `__getattr__` through `moved_name`, which
warns on every use of the old path."""

from __future__ import annotations

from skyrl_sdk.moved import REMOVED_IN, Move, MoveTable, NameMove

__all__ = ["MOVES", "NAME_MOVES", "REMOVED_IN", "moved_name", "warn_moved"]

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

_LOOP = "skyrl_sdk.trainer.loop"
_ASYNC = "skyrl_sdk.trainer.async_trainer"
_RAY = "skyrl_sdk.trainer.ray_mode"
_TINKER = "skyrl_sdk.trainer.tinker_trainer"
_BATCH = "skyrl_sdk.trainer.batch"
_BASE = "skyrl_sdk.trainer.backends.base"
_RUN = "skyrl_sdk.trainer.run"
_RUN_ENV = "skyrl_sdk.trainer.run_env"


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

_TABLE = MoveTable(MOVES, NAME_MOVES)
warn_moved = _TABLE.warn
moved_name = _TABLE.moved_name
