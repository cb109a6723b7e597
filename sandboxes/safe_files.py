"""Reading files an untrusted party could have planted: no symlinks, no FIFOs, size-capped.

After a sandbox ran, the host often reads files back out of its workspace (`reward.txt`,
`result.json`, test logs). Anything in that directory may be a symlink to a host file (the
host reads as root), a FIFO that blocks the reader forever, or a multi-gigabyte file.
`read_regular_file` refuses the first two and caps the third:

- every path component is opened relative to its parent's descriptor with `O_NOFOLLOW`
  (directories with `O_DIRECTORY` too), so a symlink anywhere in the path is refused, not
  followed, and nothing can be swapped in between a check and the open;
- the file itself is opened with `O_NONBLOCK | O_NOCTTY` (opening a FIFO or a terminal never
  blocks or takes it over) and must be a regular file by `fstat` of the opened descriptor;
- at most `max_bytes` are read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["UnsafeFileError", "read_regular_file"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


class UnsafeFileError(OSError):
    """The path is a symlink, passes through one, or is not a regular file (FIFO, device...)."""


def _open_dir(name: str, dir_fd: int | None, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFileError(errno.ELOOP, "path component is a symlink", shown) from None
        if e.errno == errno.ENOTDIR and _is_symlink(name, dir_fd):
            raise UnsafeFileError(errno.ELOOP, "path component is a symlink", shown) from None
        raise


def _is_symlink(name: str, dir_fd: int | None) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISLNK(st.st_mode)


def read_regular_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int,
    tail: bool = False,
    under: str | os.PathLike[str] | None = None,
) -> bytes:
    """The content of a regular file, read without following any symlink, capped.

    Args:
        path: The file. A relative path is taken from `under` (or the current directory).
        max_bytes: The most bytes returned: the first ones, or the last ones with `tail`.
        tail: Return the last `max_bytes` bytes instead of the first.
        under: A trusted directory, opened normally (symlinks in *its* path are followed);
            only the components of `path` below it are opened without following symlinks.
            With `under`, `path` must be relative to it and stay inside it (no `..`).

    Raises:
        UnsafeFileError: A component is a symlink, or the file is not a regular file.
        FileNotFoundError: A component does not exist.
        ValueError: `max_bytes` is negative, or `path` leaves `under`.
    """
    if not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
    shown = os.fspath(path)
    if under is not None:
        rel = Path(shown)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"{shown!r} must be a relative path inside {os.fspath(under)!r}")
        start = os.open(os.fspath(under), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        parts = [p for p in rel.parts if p not in ("", ".")]
    else:
        # Lexical normalisation only: `..` is resolved on the names, never through a link.
        full = os.path.normpath(os.path.join(os.getcwd(), shown))
        start = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        parts = [p for p in full.split("/") if p]
    if not parts:
        os.close(start)
        raise UnsafeFileError(errno.EISDIR, "not a regular file", shown)
    fd = start
    try:
        for name in parts[:-1]:
            child = _open_dir(name, fd, shown)
            os.close(fd)
            fd = child
        try:
            file_fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UnsafeFileError(errno.ELOOP, "is a symlink", shown) from None
            if e.errno == errno.EISDIR:
                raise UnsafeFileError(errno.EISDIR, "not a regular file", shown) from None
            raise
    finally:
        os.close(fd)
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(errno.EINVAL, "not a regular file", shown)
        os.set_blocking(file_fd, True)
        if tail and st.st_size > max_bytes:
            os.lseek(file_fd, st.st_size - max_bytes, os.SEEK_SET)
        chunks: list[bytes] = []
        left = max_bytes
        while left > 0:
            chunk = os.read(file_fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(file_fd)
