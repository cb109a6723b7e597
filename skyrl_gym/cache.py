"""Where built artefacts (bundled databases, indexes, converted models) are kept."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$SKYRL_CACHE`, else `~/.cache/skyrl`. Everything in it can be rebuilt from the repo."""
    return Path(os.environ.get("SKYRL_CACHE", Path.home() / ".cache" / "skyrl"))
