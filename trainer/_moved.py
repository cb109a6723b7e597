"""The deprecation warning of a module that moved (issue 26): its old path stays importable for
one release as a thin alias that re-exports the new module and calls `warn_moved` once.

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
