"""Shared test fixtures: real bwrap sandboxes, and a real dockerd started here.

Docker tests all live in `xdist_group("docker")`, so under `-n 2 --dist loadgroup` a single
worker starts the engine. The `docker_engine` fixture installs `docker.io` and
`busybox-static` with apt if they are missing, starts `dockerd` on a private socket with the
flags that leave the host network alone (no bridge, no iptables), imports a busybox image
built from a local root filesystem (nothing can be pulled), and stops dockerd at the end.
When no engine can be started, docker tests skip and say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
IMAGE = "skyrl-test-busybox:latest"
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-q", "-y"]


def arun(coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
    """Run a coroutine to completion with a hard timeout (so no test can hang)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def bwrap_usable() -> str | None:
    """None if bwrap sandboxes can start here, else the reason."""
    if not shutil.which("bwrap"):
        return "bwrap is not installed (apt-get install bubblewrap)"
    probe = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"], capture_output=True, timeout=30
    )
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.decode(errors='replace')}"
    return None


_BWRAP_PROBLEM = bwrap_usable()
needs_bwrap = pytest.mark.skipif(_BWRAP_PROBLEM is not None, reason=_BWRAP_PROBLEM or "")


@contextlib.contextmanager
def tcp_listener(host: str, reply: bytes) -> Iterator[int]:
    """A TCP server on the host's `host` that sends `reply` to every connection; yields its
    port. Tests of network isolation connect to it from inside a sandbox."""
    server = socket.socket()
    server.bind((host, 0))
    server.listen(16)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        server.close()


@pytest.fixture
def host_listener() -> Iterator[int]:
    """An HTTP-ish listener on the host's 127.0.0.1 answering "hello"; yields its port."""
    with tcp_listener("127.0.0.1", b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello") as port:
        yield port


def processes_matching(marker: str) -> list[int]:
    """PIDs on the host whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


# ---- docker ------------------------------------------------------------------------------------


def _apt_install(*packages: str) -> str | None:
    if os.geteuid() != 0:
        return f"not root: cannot apt-get install {' '.join(packages)}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    update = subprocess.run([*APT[:-1], "update"], capture_output=True, env=env, timeout=600)
    if update.returncode != 0:
        return f"apt-get update failed: {update.stderr.decode(errors='replace')[-300:]}"
    done = subprocess.run(
        [*APT, "install", "--no-install-recommends", *packages],
        capture_output=True,
        env=env,
        timeout=900,
    )
    if done.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {done.stderr.decode(errors='replace')[-300:]}"
    return None


def _busybox_rootfs_tar() -> bytes:
    """A root filesystem: static busybox plus one symlink per applet, and empty dirs."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "tmp", "workspace", "etc", "proc", "dev", "sys", "run", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add(busybox, arcname="bin/busybox")
        for name in applets.stdout.split():
            if name == "busybox":
                continue
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    return buf.getvalue()


def _start_docker() -> tuple[subprocess.Popen[bytes] | None, str, str | None]:
    """(dockerd process, scratch dir, problem). `problem` is None when the engine is ready."""
    scratch = tempfile.mkdtemp(prefix="skyrl-dockerd-")
    if not shutil.which("dockerd"):
        problem = _apt_install("docker.io")
        if problem:
            return None, scratch, problem
    if not (shutil.which("busybox") and "static" in _file_type(shutil.which("busybox"))):
        problem = _apt_install("busybox-static")
        if problem:
            return None, scratch, problem
    try:
        import docker
    except ImportError:
        return None, scratch, "the docker SDK is not installed (pip install 'skyrl-sdk[docker]')"
    sock = f"unix://{scratch}/docker.sock"
    log = open(f"{scratch}/dockerd.log", "wb")  # noqa: SIM115 - owned by the daemon
    proc = subprocess.Popen(
        [
            "dockerd",
            f"--data-root={scratch}/data",
            f"--exec-root={scratch}/exec",
            f"--pidfile={scratch}/dockerd.pid",
            f"--host={sock}",
            "--bridge=none",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            f"--containerd-namespace=skyrl-{os.getpid()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            client = docker.DockerClient(base_url=sock, timeout=30)
            client.ping()
            break
        except Exception as e:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = Path(f"{scratch}/dockerd.log").read_text(errors="replace")[-600:]
                return None, scratch, f"dockerd did not start ({e}): {tail}"
            time.sleep(0.2)
    try:
        client.api.import_image_from_data(
            _busybox_rootfs_tar(), repository=IMAGE.split(":")[0], tag="latest"
        )
    except Exception as e:
        proc.kill()
        return None, scratch, f"cannot build the busybox test image: {e}"
    finally:
        client.close()
    os.environ["DOCKER_HOST"] = sock
    return proc, scratch, None


def _file_type(path: str | None) -> str:
    if not path:
        return ""
    out = subprocess.run(["file", "-L", path], capture_output=True, text=True)
    if out.returncode != 0:  # no `file` tool: a static busybox is large, a dynamic one small
        return "static" if os.path.getsize(path) > 1_500_000 else ""
    return out.stdout


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[str]:
    """Start dockerd (installing it if needed) and yield the test image's name."""
    started = time.monotonic()
    proc, scratch, problem = _start_docker()
    if problem:
        shutil.rmtree(scratch, ignore_errors=True)
        print(f"\nskipping docker tests: {problem}")
        pytest.skip(f"no Docker engine: {problem}")
    print(f"\ndockerd ready in {time.monotonic() - started:.1f}s at {os.environ['DOCKER_HOST']}")
    try:
        yield IMAGE
    finally:
        os.environ.pop("DOCKER_HOST", None)
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for line in reversed(Path("/proc/mounts").read_text().splitlines()):
            point = line.split()[1]
            if point.startswith(scratch):
                subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
