"""Where built artefacts (bundled databases, indexes, converted models) are kept, and how they
are built exactly once even when several processes (pytest-xdist workers) ask at the same time."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    """`$SKYRL_CACHE`, else `~/.cache/skyrl`. Everything in it can be rebuilt from the repo."""
    return Path(os.environ.get("SKYRL_CACHE", Path.home() / ".cache" / "skyrl"))


def build_once(target: Path, build: Callable[[Path], object]) -> Path:
    """Return `target`, first building it with `build(path)` if it does not exist.

    `build` writes a file or a directory at the path it is given, a private staging path next to
    `target`; the result is then renamed into place in one step. So a reader never sees a
    half-built artefact, and when two processes race, the loser's identical copy is dropped.
    Key `target`'s name by a hash of the inputs, so a changed input builds anew.
    """
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging_dir = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        staged = staging_dir / target.name
        build(staged)
        try:
            os.replace(staged, target)
        except OSError:  # a non-empty directory is already there: another process won
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
    return target
