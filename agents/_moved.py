"""The deprecation warning of an `agents` module that moved (issue 26): its old path stays
importable for one release as a thin alias that re-exports the new module and calls
`warn_moved` once (the style of `skyrl_sdk.trainer._moved`).

The warning is attributed to the code that imported the old path, so Python's default
filters show it to that code's author.
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
    """The deprecated import path, e.g. `skyrl_sdk.agents.local_engine`."""
    new: str
    """Where it lives now, e.g. `skyrl_sdk.agents.engine.frontend`."""
    also: tuple[str, ...] = ()
    """Other new modules holding names the old one had (private ones tests reach)."""


MOVES: tuple[Move, ...] = (
    Move(
        "skyrl_sdk.agents.local_engine",
        "skyrl_sdk.agents.engine.frontend",
        also=(
            "skyrl_sdk.agents.engine.sampler",
            "skyrl_sdk.agents.engine.stats",
            "skyrl_sdk.agents.engine.scheduler",
            "skyrl_sdk.agents.engine.request",
        ),
    ),
    Move("skyrl_sdk.agents.kv_cache", "skyrl_sdk.agents.engine.prefix_cache"),
    Move("skyrl_sdk.agents.kv_slots", "skyrl_sdk.agents.engine.kv_slots"),
    Move("skyrl_sdk.agents.packed_step", "skyrl_sdk.agents.engine.packed_step"),
    Move("skyrl_sdk.agents.sampling", "skyrl_sdk.agents.engine.sampler"),
    Move("skyrl_sdk.agents.split_linear", "skyrl_sdk.agents.engine.split_linear"),
    Move("skyrl_sdk.agents.fairness", "skyrl_sdk.agents.engine.fairness"),
)
"""Every deprecated alias in this package, old -> new (the tests import each one)."""

OLD_NAMES: dict[str, str] = {"_Request": "Request", "_sample_top": "sample_top"}
"""Private names of the old modules that were renamed in the new ones."""


def warn_moved(old: str) -> None:
    """Emit the `DeprecationWarning` for importing the old path `old`."""
    move = next(m for m in MOVES if m.old == old)
    warnings.warn(
        f"`{move.old}` moved to `{move.new}`; import it from there "
        f"(the old path is removed in {REMOVED_IN})",
        DeprecationWarning,
        # 1: this call; 2: the alias module; 3: its importer.
        stacklevel=3,
    )


def moved_attr(old: str, name: str) -> Any:
    """`name` of the old module `old`, found in its new modules (its `__getattr__`)."""
    move = next(m for m in MOVES if m.old == old)
    for module in (move.new, *move.also):
        found = importlib.import_module(module)
        if hasattr(found, name):
            return getattr(found, name)
        if name in OLD_NAMES and hasattr(found, OLD_NAMES[name]):
            return getattr(found, OLD_NAMES[name])
    raise AttributeError(f"module {old!r} has no attribute {name!r}")
