"""Checkpoint files under the server's state dir: where each lives, lookup by tinker:// path,
deletion and expiry.

`Checkpoints.state_path` is the one place a path under the state dir is built; it refuses any
path that resolves outside it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from skyrl_sdk.trainer.tinker.names import TINKER_PATH, check_name, run_dir_name
from skyrl_sdk.trainer.tinker.store import CheckpointKind, CheckpointRow, Registry


def disk_usage(directory: Path) -> int:
    """Bytes of the files under `directory`."""
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


class Checkpoints:
    """The checkpoint directories and their registry rows."""

    def __init__(self, state_dir: Path, registry: Registry):
        self.state_dir = state_dir.resolve()
        """The state dir, resolved once (`state_path` compares resolved paths against it)."""
        self.registry = registry

    def rel(self, directory: Path) -> str:
        """`directory` relative to the state dir (what the registry stores)."""
        return str(directory.relative_to(self.state_dir))

    def state_path(self, *parts: str) -> Path:
        """`state_dir / parts...`, resolved; ValueError unless it lies strictly inside the state
        dir. Every path the server reads, writes or deletes under its state dir is built here."""
        path = self.state_dir.joinpath(*parts).resolve()
        if path == self.state_dir or not path.is_relative_to(self.state_dir):
            raise ValueError(f"path {'/'.join(parts)!r} is outside the server's state dir")
        return path

    def directory(self, model_id: str, kind: str, name: str) -> Path:
        """The directory of checkpoint `name` of `kind` of run `model_id` (names checked)."""
        if kind not in (k.value for k in CheckpointKind):
            raise ValueError(f"unknown checkpoint kind {kind!r}")
        return self.state_path("checkpoints", run_dir_name(model_id), kind, check_name(name))

    def autosave_dir(self, model_id: str) -> Path:
        """Where a shutdown autosave of `model_id` goes."""
        return self.state_path("checkpoints", run_dir_name(model_id), "autosave")

    def resolve(self, path: str) -> tuple[CheckpointRow, Path]:
        """The row and directory of a saved `tinker://run/kind/name` path.

        ValueError if malformed; KeyError if there is no such checkpoint (or it expired).
        """
        m = TINKER_PATH.match(path)
        if not m:
            raise ValueError(
                f"not a tinker:// checkpoint path: {path!r} "
                "(expected tinker://<run>/weights|sampler_weights/<name>)"
            )
        directory = self.directory(*m.groups())  # ValueError for a bad name
        self.purge_expired()
        row = self.registry.checkpoints.get(path)
        if row is None:
            raise KeyError(f"no checkpoint at {path} (never saved, deleted, or expired)")
        return row, directory

    def delete(self, path: str) -> None:
        """Remove a checkpoint's files and row (KeyError if unknown)."""
        m = TINKER_PATH.match(path)
        row = self.registry.checkpoints.get(path)
        if m is None or row is None:
            raise KeyError(f"no checkpoint at {path}")
        try:
            directory: Path | None = self.directory(*m.groups())
        except ValueError:  # a row an older server let through ("..": its files are not its own)
            directory = None
        if directory is not None and directory.exists():
            shutil.rmtree(directory)
        self.registry.checkpoints.delete(path)

    def purge_expired(self) -> None:
        """Delete the checkpoints whose TTL ran out."""
        for row in self.registry.expired(time.time()):
            self.delete(row.tinker_path)
