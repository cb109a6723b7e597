"""The copy behind a bwrap trial's Dockerfile COPY and /solution: a standalone script.

`skyrl_gym.envs.harbor.host.charged_copy` runs it as `python -I -S _copier.py` in a child
process that first joins the started sandbox's cgroups, so the workspace pages it writes (a
tmpfs: memory) are charged to the sandbox's memory cap, not to the host outside every cgroup.
It imports only the standard library (it runs with `-S`).

Request (JSON on stdin): `{"dest_root": DIR, "jobs": [{"src": PATH, "dest": REL, "tree":
bool}], "owner": UID | null, "budget": BYTES}`. A file job copies `src` to `dest_root/dest`;
a tree job copies the *contents* of directory `src` into `dest_root/dest`.

- Sparse stays sparse: only the data segments (`SEEK_DATA` / `SEEK_HOLE`) are read, and a
  chunk of zeros inside them is left a hole (like `cp --sparse=always`), so a 2 GiB sparse
  file costs nothing.
- The destination is walked from `dest_root` by directory descriptors without following any
  link (a RUN step, as the sandbox user, may have left `/app/x -> /etc/passwd`): a link in
  the way is refused, and an existing file is replaced (unlinked, created anew), never
  written through.
- Inside source trees links are copied as links, FIFOs, sockets and devices are skipped
  (a FIFO would block the copy), set-uid bits are dropped, and at most `budget` bytes of
  data are written in all.

Reply (stdout, JSON lines): `{"note": ...}` per thing skipped, then `{"done": true}` or
`{"error": ...}` (exit status 1).
"""

import json
import os
import stat
import sys

CHUNK = 1 << 20
ZEROS = bytes(CHUNK)
MAX_NOTES = 50
MAX_DEPTH = 256
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """The copy cannot go on (a link in the destination, the budget spent, ...)."""


class Copier:
    def __init__(self, owner, budget):
        self.owner = owner
        self.budget = budget
        self.notes = 0

    def note(self, text):
        self.notes += 1
        if self.notes <= MAX_NOTES:
            print(json.dumps({"note": text}), flush=True)

    def subdir(self, parent_fd, name, shown):
        """Open (making it if needed) directory `name` under `parent_fd`, never a link."""
        try:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
            if self.owner is not None:
                os.chown(name, self.owner, self.owner, dir_fd=parent_fd, follow_symlinks=False)
        except FileExistsError:
            pass
        try:
            return os.open(name, _DIR, dir_fd=parent_fd)
        except OSError:
            raise Refused(
                f"{shown}: a link or not a directory in the destination; not followed"
            ) from None

    def walk_to(self, root_fd, rel):
        """The directory fd of `rel` (a relative path) under `root_fd`, made as needed."""
        fd = os.dup(root_fd)
        shown = ""
        for part in [p for p in rel.split("/") if p not in ("", ".")]:
            if part == "..":
                os.close(fd)
                raise Refused(f"{rel}: leaves the destination")
            shown = f"{shown}/{part}" if shown else part
            try:
                child = self.subdir(fd, part, shown)
            finally:
                os.close(fd)
            fd = child
        return fd

    def clear(self, dir_fd, name, shown):
        """Remove what is at `name` (a file or link) so a new entry can be made there."""
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            raise Refused(f"{shown}: a directory is in the way")
        os.unlink(name, dir_fd=dir_fd)

    def copy_file(self, src_fd, info, dir_fd, name, shown):
        self.clear(dir_fd, name, shown)
        mode = stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        dst = os.open(name, flags, mode, dir_fd=dir_fd)
        try:
            if self.owner is not None:
                os.fchown(dst, self.owner, self.owner)
            os.fchmod(dst, mode)
            self.sparse_copy(src_fd, dst, info.st_size, shown)
            os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(dst)

    def sparse_copy(self, src, dst, size, shown):
        os.ftruncate(dst, size)  # all holes; the data segments are written below
        pos = 0
        while pos < size:
            try:
                start = os.lseek(src, pos, os.SEEK_DATA)
                end = os.lseek(src, start, os.SEEK_HOLE)
            except OSError as e:
                if e.errno == 6:  # ENXIO: no data after pos
                    return
                start, end = pos, size  # no SEEK_DATA here: read it all, skip zero chunks
            off = start
            while off < end:
                data = os.pread(src, min(CHUNK, end - off), off)
                if not data:
                    return
                if data != ZEROS[: len(data)]:
                    self.budget -= len(data)
                    if self.budget < 0:
                        raise Refused(f"{shown}: the copy is larger than the workspace's cap")
                    view = memoryview(data)
                    at = off
                    while view:
                        n = os.pwrite(dst, view, at)
                        view, at = view[n:], at + n
                off += len(data)
            pos = end

    def copy_path(self, src, dir_fd, name, shown):
        """Copy the file `src` (a path, links followed: the caller checked it) to `name`."""
        fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self.note(f"{shown}: not a regular file; skipped")
                return
            self.copy_file(fd, info, dir_fd, name, shown)
        finally:
            os.close(fd)

    def copy_tree(self, src, dst_fd, shown):
        """Copy the contents of directory `src` into `dst_fd`, links as links (no recursion:
        a deep tree cannot exhaust the stack)."""
        top = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        stack = [(top, os.dup(dst_fd), shown, 0)]
        while stack:
            sfd, dfd, where, depth = stack.pop()
            try:
                for entry in sorted(os.scandir(sfd), key=lambda e: e.name):
                    rel = f"{where}/{entry.name}"
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISLNK(info.st_mode):
                        self.clear(dfd, entry.name, rel)
                        os.symlink(os.readlink(entry.name, dir_fd=sfd), entry.name, dir_fd=dfd)
                        if self.owner is not None:
                            os.chown(
                                entry.name,
                                self.owner,
                                self.owner,
                                dir_fd=dfd,
                                follow_symlinks=False,
                            )
                    elif stat.S_ISDIR(info.st_mode):
                        if depth >= MAX_DEPTH:
                            self.note(f"{rel}: deeper than {MAX_DEPTH} levels; not copied")
                            continue
                        child_src = os.open(entry.name, _DIR, dir_fd=sfd)
                        try:
                            child_dst = self.subdir(dfd, entry.name, rel)
                        except BaseException:
                            os.close(child_src)
                            raise
                        stack.append((child_src, child_dst, rel, depth + 1))
                    elif stat.S_ISREG(info.st_mode):
                        fd = os.open(
                            entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=sfd
                        )
                        try:
                            real = os.fstat(fd)
                            if stat.S_ISREG(real.st_mode):
                                self.copy_file(fd, real, dfd, entry.name, rel)
                        finally:
                            os.close(fd)
                    else:
                        self.note(f"{rel}: not a regular file, directory or link; skipped")
            finally:
                os.close(sfd)
                os.close(dfd)


def main():
    request = json.loads(sys.stdin.read())
    copier = Copier(request.get("owner"), int(request["budget"]))
    root = os.open(request["dest_root"], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    job = {"dest": "."}
    try:
        for job in request["jobs"]:
            dest = job["dest"].strip("/")
            if job["tree"]:
                fd = copier.walk_to(root, dest)
                try:
                    copier.copy_tree(job["src"], fd, dest or ".")
                finally:
                    os.close(fd)
            else:
                parent, _, name = dest.rpartition("/")
                if not name:
                    raise Refused(f"{job['dest']}: no file name")
                fd = copier.walk_to(root, parent)
                try:
                    copier.copy_path(job["src"], fd, name, dest)
                finally:
                    os.close(fd)
    except Refused as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    except OSError as e:
        print(json.dumps({"error": f"{job['dest']}: {e.strerror or e}"}), flush=True)
        return 1
    finally:
        os.close(root)
    if copier.notes > MAX_NOTES:
        print(json.dumps({"note": f"{copier.notes - MAX_NOTES} more entries skipped"}))
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
