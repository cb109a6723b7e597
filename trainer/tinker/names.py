"""Names the server turns into paths: checkpoint names, run ids and tinker:// paths.

Checkpoint names and training run ids become directory names under the state dir, so
`check_name` refuses anything that could leave its folder (`.`, `..`, separators, NUL) and
anything long or unusual.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 128
"""Longest checkpoint name (and training run id) accepted."""
_NAME_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
TINKER_PATH = re.compile(r"^tinker://([^/]+)/(weights|sampler_weights)/([^/]+)$")
"""A saved checkpoint's address: run id, kind and name."""


def check_name(name: str | None, what: str = "checkpoint name") -> str:
    """`name` if it is safe as one directory name; ValueError saying which rule it breaks.

    Refused: empty, `.` and `..` (they name the parent or the directory itself: `save_state("..")`
    would replace the run's whole checkpoint folder), path separators, NUL, more than
    `MAX_NAME_LENGTH` characters, and anything but letters, digits, `.`, `_` and `-`.
    """
    if not name:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in name:
        raise ValueError(f"{what} must not contain NUL, got {name!r}")
    if "/" in name or "\\" in name:
        raise ValueError(f"{what} must be one name without '/' or '\\', got {name!r}")
    if name in (".", ".."):
        raise ValueError(f"{what} must not be '.' or '..', got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} must be at most {MAX_NAME_LENGTH} characters, got {len(name)}")
    if not _NAME_CHARS.match(name):
        raise ValueError(f"{what} may use only letters, digits, '.', '_' and '-', got {name!r}")
    return name


def run_dir_name(model_id: str) -> str:
    """The directory name of a training run's checkpoints (its id with `:` as `_`)."""
    return check_name(model_id.replace(":", "_"), "training run id")


def model_id_of(session_id: str, model_seq_id: int) -> str:
    """A training run's id, as the SDK builds it: `{session}:train:{seq}`."""
    return f"{session_id}:train:{model_seq_id}"


def session_of(model_id: str) -> str:
    """The session part of a model id."""
    return model_id.split(":train:")[0]
