"""The deprecation warning of a benchmark module that moved (issue 26): its old path stays
importable for one release as a thin alias that re-exports the new module and calls `warn_moved`
once.

The warning is attributed to the code that imported the old path (or to `__main__` when the old
path is run with `python -m`), so Python's default filters show it to that code's author.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

REMOVED_IN = "the release after 0.1"
"""When the old paths go."""


@dataclass(frozen=True)
class Move:
    """One module's move."""

    old: str
    """The deprecated import path, e.g. `skyrl_sdk.benchmarks.sandbox_bench`."""
    new: str
    """Where it lives now, e.g. `skyrl_sdk.benchmarks.perf.sandbox`."""


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
