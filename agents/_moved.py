"""What moved in the agents package (issue 26: the engine into `agents/engine/`), for
`skyrl_sdk.moved`: each old module is a thin alias that re-exports the new one, calls
`warn_moved`, and finds its other names (private ones the tests reach) with `moved_attr`."""

from __future__ import annotations

from skyrl_sdk.moved import REMOVED_IN, Move, MoveTable

__all__ = ["MOVES", "OLD_NAMES", "REMOVED_IN", "moved_attr", "warn_moved"]

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

_TABLE = MoveTable(MOVES, renamed=OLD_NAMES)
warn_moved = _TABLE.warn
moved_attr = _TABLE.attr
