"""Deprecated import paths (issue 26 moved modules and names): one mechanism for every
package. A package lists its moves in its own `_moved.py` as a `MoveTable`; an old module
stays importable for one release as a thin alias that re-exports the new one and calls
`warn`, and a module that stays but lost names serves them from its `__getattr__` through
`moved_name`.

Each warning is attributed to the code that used the old path (or to `__main__` when the old
path is run with `python -m`), so Python's default filters show it to that code's author.
A leaf: it imports nothing of the SDK, so any layer may use it.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
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
    also: tuple[str, ...] = ()
    """Other new modules holding names the old one had (private ones tests reach)."""


@dataclass(frozen=True)
class NameMove:
    """One name that moved out of a module that stays."""

    old: str
    """The module it was imported from, e.g. `skyrl_sdk.trainer.async_trainer`."""
    name: str
    """The name, e.g. `pick_batch`."""
    new: str
    """The module it lives in now, e.g. `skyrl_sdk.trainer.batch`."""


@dataclass(frozen=True)
class MoveTable:
    """A package's moves, and the warnings and look-ups its aliases use."""

    modules: tuple[Move, ...] = ()
    """Every module moved out of the package, old -> new."""
    names: tuple[NameMove, ...] = ()
    """Every name moved out of a module that stays."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Private names of old modules that are spelled differently in the new ones."""

    def __iter__(self) -> Iterator[Move]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def move(self, old: str) -> Move:
        """The move of the old module path `old`."""
        return next(m for m in self.modules if m.old == old)

    def warn(self, old: str, *, as_main: bool = False) -> None:
        """Emit the `DeprecationWarning` for importing (or running, `as_main`) `old`."""
        move = self.move(old)
        warnings.warn(
            f"`{move.old}` moved to `{move.new}`; import it from there "
            f"(the old path is removed in {REMOVED_IN})",
            DeprecationWarning,
            # 1: this call; 2: the alias module (`__main__` under `python -m`); 3: its importer.
            stacklevel=2 if as_main else 3,
        )

    def attr(self, old: str, name: str) -> Any:
        """`name` of the old module `old`, found in its new modules (its `__getattr__`)."""
        move = self.move(old)
        for module in (move.new, *move.also):
            found = importlib.import_module(module)
            if hasattr(found, name):
                return getattr(found, name)
            if name in self.renamed and hasattr(found, self.renamed[name]):
                return getattr(found, self.renamed[name])
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    def moved_name(self, old: str, name: str) -> Any:
        """`old.name` from the module it moved to, with a `DeprecationWarning` attributed to
        the code that used the old path (call it from `old`'s module `__getattr__`);
        AttributeError for a name that never was there."""
        move = next((m for m in self.names if m.old == old and m.name == name), None)
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
