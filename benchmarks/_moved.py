"""What moved in the benchmarks (issue 26: the performance benchmarks into `perf/`), for
`skyrl_sdk.moved`: each old module is a thin alias that re-exports the new one and calls
`warn_moved` (with `as_main` when run with `python -m`)."""

from __future__ import annotations

from skyrl_sdk.moved import REMOVED_IN, Move, MoveTable

__all__ = ["MOVES", "REMOVED_IN", "warn_moved"]

MOVES: tuple[Move, ...] = (
    Move("skyrl_sdk.benchmarks.async_bench", "skyrl_sdk.benchmarks.perf.async_rl"),
    Move("skyrl_sdk.benchmarks.cli", "skyrl_sdk.benchmarks.perf.cli"),
    Move("skyrl_sdk.benchmarks.engine_bench", "skyrl_sdk.benchmarks.perf.engine"),
    Move("skyrl_sdk.benchmarks.env_step", "skyrl_sdk.benchmarks.perf.env"),
    Move("skyrl_sdk.benchmarks.peer_venv", "skyrl_sdk.benchmarks.perf.peer_venv"),
    Move("skyrl_sdk.benchmarks.report", "skyrl_sdk.benchmarks.perf.report"),
    Move("skyrl_sdk.benchmarks.rollout_bench", "skyrl_sdk.benchmarks.perf.rollout"),
    Move("skyrl_sdk.benchmarks.sandbox_bench", "skyrl_sdk.benchmarks.perf.sandbox"),
    Move("skyrl_sdk.benchmarks.search_bench", "skyrl_sdk.benchmarks.perf.search"),
    Move("skyrl_sdk.benchmarks.serve_bench", "skyrl_sdk.benchmarks.perf.serve"),
    Move("skyrl_sdk.benchmarks.sql_bench", "skyrl_sdk.benchmarks.perf.sql"),
    Move("skyrl_sdk.benchmarks.tinker_bench", "skyrl_sdk.benchmarks.perf.tinker"),
    Move("skyrl_sdk.benchmarks.trainer_bench", "skyrl_sdk.benchmarks.perf.trainer"),
)
"""Every deprecated alias in this package, old -> new (the tests import each one)."""

warn_moved = MoveTable(MOVES).warn
