"""Which optional extra of the `skyrl-sdk` distribution provides a missing module.

Optional features import their packages lazily, so a plain `pip install skyrl-sdk` runs every
core command and fails only when a feature's package is absent. `missing_module_message` turns
that `ModuleNotFoundError` into one line naming the extra to install
(`pip install 'skyrl-sdk[train]'`), read from the installed distribution's own metadata, so the
mapping never drifts from pyproject.toml's `[project.optional-dependencies]`.
"""

from __future__ import annotations

import importlib.metadata
import re
from functools import cache

DISTRIBUTION = "skyrl-sdk"
"""The distribution whose extras are searched."""

IMPORT_ALIASES: dict[str, str] = {
    "yaml": "pyyaml",
    # starlette and h11 come with fastapi and uvicorn (the `server` extra), not on their own.
    "starlette": "fastapi",
    "h11": "uvicorn",
}
"""Import names whose distribution has another name (others: the same name)."""

SKIPPED_EXTRAS = frozenset({"dev"})
"""Extras never suggested (test tooling; it pulls in far more than the feature needs)."""

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _normalize(name: str) -> str:
    """A distribution name in PEP 503 form (`Foo_Bar` -> `foo-bar`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _extras_by_requirement() -> dict[str, tuple[str, ...]]:
    """Normalized requirement name -> the extras that list it ("" for a core dependency);
    empty when the distribution is not installed (running from a bare checkout)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    found: dict[str, list[str]] = {}
    for line in requires:
        requirement, _, marker = line.partition(";")
        name = _NAME.match(requirement)
        if name is None:
            continue
        extra = _EXTRA.search(marker)
        found.setdefault(_normalize(name.group(1)), []).append(extra.group(1) if extra else "")
    return {name: tuple(sorted(set(extras))) for name, extras in found.items()}


def extras_providing(module: str) -> tuple[str, ...] | None:
    """The extras that install `module` (a dotted import name), sorted; `("",)` when it is a
    core dependency; None when `skyrl-sdk` does not require it at all."""
    top = module.split(".")[0]
    extras = _extras_by_requirement().get(_normalize(IMPORT_ALIASES.get(top, top)))
    if extras is None:
        return None
    if "" in extras:
        return ("",)
    return tuple(e for e in extras if e not in SKIPPED_EXTRAS) or None


def missing_module_message(error: ModuleNotFoundError, what: str = "this") -> str | None:
    """One line saying which extra (or dependency) provides the module `error` is about, or
    None when it is none of ours (a bug: keep the traceback). `what` names the feature."""
    if not error.name:
        return None
    extras = extras_providing(error.name)
    if extras is None:
        return None
    module = error.name.split(".")[0]
    if extras == ("",):  # a broken install: a core dependency is gone
        return f"{what} needs {module}, a dependency of {DISTRIBUTION}: pip install {DISTRIBUTION}"
    named = " or ".join(repr(e) for e in extras)
    return (
        f"{what} needs {module}, from the {named} extra: pip install '{DISTRIBUTION}[{extras[0]}]'"
    )
