"""Local stand-ins for the base images real-format tasks name (`python:3.12-slim`,
`debian:bookworm-slim`), for the docker tests: nothing can be pulled here.

`import_host_slice` imports one image built from a slice of this host's system: static
busybox (its applets are coreutils, awk, tar, ...), bash, the host's python3 with its standard
library (no site-packages), tmux where the host has it, and the shared libraries they link,
found with `ldd`. It is tagged under each name given, so a task's `FROM python:3.12-slim`
builds on the local engine as it would on a machine that had pulled the image.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

STAND_INS = ("python:3.12-slim", "debian:bookworm-slim")
"""The base images the real-format fixtures name."""

_DIRS = (
    "bin",
    "usr/bin",
    "usr/sbin",
    "usr/lib",
    "tmp",
    "etc",
    "proc",
    "dev",
    "sys",
    "run",
    "root",
    "var",
)
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages"}
_SKIP_STDLIB |= {"dist-packages", "lib2to3", "pydoc_data"}


def _libraries(binaries: list[str]) -> set[str]:
    """The shared libraries (and the loader) `binaries` link, as absolute host paths."""
    found: set[str] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                found.add(path)
    return found


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    if name in tar.getnames():  # a tar with duplicate paths is refused by the engine
        return
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, host: str, arcname: str) -> None:
    tar.add(os.path.realpath(host), arcname=arcname, recursive=False)


def host_slice_tar() -> bytes:
    """The image's root filesystem as a tar (see the module docstring)."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    bash = shutil.which("bash") or "/bin/bash"
    # The system's python3 (its prefix is /usr), not a virtualenv's or pyenv's.
    python = os.path.realpath("/usr/bin/python3")
    version = Path(python).name.removeprefix("python")
    stdlib = Path(f"/usr/lib/python{version}")
    dynload = stdlib / "lib-dynload"
    tmux = shutil.which("tmux")
    binaries = [bash, python, *(str(p) for p in dynload.glob("*.so"))]
    if tmux:
        binaries.append(tmux)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in _DIRS:
            _add_dir(tar, d, 0o1777 if d == "tmp" else 0o755)
        _add_file(tar, busybox, "bin/busybox")
        applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
        for name in applets.stdout.split():
            if name in ("busybox", "bash", "sh"):
                continue
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        _add_file(tar, bash, "bin/bash")
        sh = tarfile.TarInfo("bin/sh")
        sh.type, sh.linkname = tarfile.SYMTYPE, "bash"
        tar.addfile(sh)
        _add_file(tar, python, "usr/bin/python3")
        if tmux:
            _add_file(tar, tmux, "usr/bin/tmux")
        for lib in sorted(_libraries(binaries)):
            parts = Path(lib).parts[1:]
            for i in range(1, len(parts)):
                _add_dir(tar, "/".join(parts[:i]))
            _add_file(tar, lib, lib.lstrip("/"))
        locale = Path("/usr/lib/locale/C.utf8")  # LANG=C.UTF-8 (tmux refuses to start without)
        if locale.is_dir():
            _add_dir(tar, "usr/lib/locale")
            tar.add(str(locale), arcname="usr/lib/locale/C.utf8")
        arc = str(stdlib).lstrip("/")
        for parent in reversed(Path(arc).parents):
            if str(parent) != ".":
                _add_dir(tar, str(parent))

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            rel = Path(info.name).relative_to(arc).parts
            if rel and (rel[0] in _SKIP_STDLIB or "__pycache__" in rel):
                return None
            return info

        tar.add(str(stdlib), arcname=arc, filter=keep)
        for name, text in (
            # As Debian images have them: nobody cannot log in (a tmux pane needs $SHELL).
            (
                "etc/passwd",
                "root:x:0:0:root:/root:/bin/bash\n"
                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            ),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
            (
                "usr/sbin/nologin",
                "#!/bin/sh\necho 'This account is currently not available.'\nexit 1\n",
            ),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if "bin/" in name else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def import_host_slice(client: Any, tags: tuple[str, ...] = STAND_INS) -> None:
    """Import the host-slice image under each of `tags` (once per engine)."""
    import docker.errors

    missing = []
    for tag in tags:
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            missing.append(tag)
    if not missing:
        return
    first, *rest = missing
    repo, _, tag = first.rpartition(":")
    config = ["ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV LANG=C.UTF-8", 'CMD ["bash"]']
    client.api.import_image_from_data(host_slice_tar(), repository=repo, tag=tag, changes=config)
    image = client.images.get(first)
    for other in rest:
        repo, _, tag = other.rpartition(":")
        image.tag(repo, tag)
