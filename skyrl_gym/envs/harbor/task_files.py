"""The untrusted files of a task folder, read with the host's powers, within bounds.

A task folder's text files (task.toml, instruction.md, the Dockerfile, a Terminal-Bench 1
task.yaml) are read as regular files inside the folder, at most `TEXT_FILE_MAX_BYTES`; its
trees (tests/, solution/, a whole TB1 folder) hold at most `TREE_MAX_BYTES` and
`TREE_MAX_FILES` entries, with no FIFO, socket or device and no link out of the folder or to a
directory. Both the task reader (`task`) and the Terminal-Bench 1 converter (`tb1`) use them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

TEXT_FILE_MAX_BYTES = 1 << 20
"""The largest task.toml, instruction.md or environment/Dockerfile (1 MiB)."""
TREE_MAX_BYTES = 64 << 20
"""The most tests/ (or solution/) may hold in all, counting each file's full length (a
sparse file counts whole): both are copied into every trial."""
TREE_MAX_FILES = 10_000
"""The most entries tests/ (or solution/) may hold."""


class TaskFormatError(ValueError):
    """A task folder is malformed. `file` and `field` say where."""

    def __init__(self, task_dir: Path, file: str, problem: str, field: str | None = None):
        where = f"{file}: {field}" if field else file
        super().__init__(f"{task_dir.name}/{where}: {problem}")
        self.task_dir = task_dir
        self.file = file
        self.field = field
        self.problem = problem


def read_task_text(task_dir: Path, rel: str, what: str) -> str:
    """A text file of the task folder: a regular file inside it, at most
    `TEXT_FILE_MAX_BYTES` (checked before reading, and never read further)."""
    path = task_dir / rel
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise TaskFormatError(task_dir, rel, f"missing ({what})") from None
    except (OSError, RuntimeError) as e:  # a link loop
        raise TaskFormatError(task_dir, rel, f"cannot be read ({e})") from None
    if not resolved.is_relative_to(task_dir):
        raise TaskFormatError(task_dir, rel, "is a link out of the task folder")
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TaskFormatError(task_dir, rel, f"cannot be read ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TaskFormatError(task_dir, rel, "not a regular file")
        if info.st_size > TEXT_FILE_MAX_BYTES:
            raise TaskFormatError(
                task_dir,
                rel,
                f"{info.st_size} bytes, larger than the {TEXT_FILE_MAX_BYTES} bytes allowed",
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(TEXT_FILE_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > TEXT_FILE_MAX_BYTES:  # it grew while being read
        raise TaskFormatError(task_dir, rel, f"larger than the {TEXT_FILE_MAX_BYTES} bytes allowed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFormatError(task_dir, rel, "not UTF-8 text") from None


def check_task_tree(task_dir: Path, rel: str) -> None:
    """tests/ or solution/: at most `TREE_MAX_BYTES` and `TREE_MAX_FILES` entries, only
    directories, regular files and links to regular files inside the task folder (it is
    copied into every trial: a FIFO would hang the copy, a link out would copy a host file)."""
    root = task_dir / rel
    if root.is_symlink():
        raise TaskFormatError(task_dir, rel, "must be a directory, not a link")
    if not root.is_dir():
        return
    total, count = 0, 0
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError as e:
            raise TaskFormatError(task_dir, rel, f"cannot be listed ({e.strerror})") from None
        for entry in entries:
            count += 1
            shown = str(Path(entry.path).relative_to(task_dir))
            if count > TREE_MAX_FILES:
                raise TaskFormatError(task_dir, rel, f"more than {TREE_MAX_FILES} entries")
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as e:
                raise TaskFormatError(task_dir, shown, f"cannot be read ({e.strerror})") from None
            if stat.S_ISLNK(info.st_mode):
                try:
                    target = Path(entry.path).resolve(strict=True)
                    info = target.stat()
                except (OSError, RuntimeError):
                    raise TaskFormatError(task_dir, shown, "a broken link") from None
                if not target.is_relative_to(task_dir) or not stat.S_ISREG(info.st_mode):
                    raise TaskFormatError(
                        task_dir, shown, "a link out of the task folder or to a directory"
                    )
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(entry.path))
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > TREE_MAX_BYTES:
                    raise TaskFormatError(
                        task_dir, rel, f"holds more than the {TREE_MAX_BYTES} bytes allowed"
                    )
            else:
                raise TaskFormatError(task_dir, shown, "not a regular file, directory or link")
