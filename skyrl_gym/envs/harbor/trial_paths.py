"""Where a Harbor trial's paths are: inside the sandbox (Harbor's `/logs/agent`,
`/logs/verifier`, `/logs/artifacts`, `/tests`, `/solution`) and the host directories of the
trial's workspace that back them, handed to the sandbox's user."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from skyrl_gym.envs.harbor.host import copy_untrusted_tree
from skyrl_sdk.sandboxes import chown_tree

LOGS = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = "/logs/verifier"
ARTIFACTS = "/logs/artifacts"
TESTS = "/tests"
SOLUTION = "/solution"
SANDBOX_UID = 65534  # bwrap sandboxes started by root run as `nobody`
LOG_FILE_MAX_BYTES = 64 << 20
"""`copy_logs` copies at most this much of one file (the rest is cut, and noted)."""
LOGS_MAX_BYTES = 256 << 20
"""`copy_logs` copies at most this much in all."""


def give(path: Path) -> None:
    """Hand a host tree to the sandbox user (bwrap as root runs commands as `nobody`)."""
    if os.geteuid() == 0:
        chown_tree(path, SANDBOX_UID)


def fresh_dir(path: Path) -> Path:
    """`path` emptied (made if missing), mode 0755, the sandbox user's."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o755)
    give(path)
    return path


def copy_trial_logs(dirs: Sequence[tuple[Path, str]], trial_dir: Path) -> list[str]:
    """Copy each (host directory, name) of `dirs` into `trial_dir / name`, following nothing
    (`host.copy_untrusted_tree`; see `HarborRuntime.copy_logs`); returns what was skipped
    or cut, one line each."""
    notes: list[str] = []
    budget = [LOGS_MAX_BYTES]
    for src, name in dirs:
        dest = trial_dir / name
        dest.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            copy_untrusted_tree(
                src, dest, name, budget=budget, file_max_bytes=LOG_FILE_MAX_BYTES, notes=notes
            )
    return notes
