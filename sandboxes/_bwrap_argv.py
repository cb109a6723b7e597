"""bwrap's command line for one sandbox, one concern per function.

`bwrap.py` says what a sandbox sees and why; this module builds the arguments that make it
so: what runs bwrap (`launcher_prefix`), the namespaces (`namespace_args`), the root
(`system_mounts`: the host's minimal system, an image's root or a copy-on-write root), /proc
and its guards (`proc_args`), /etc/passwd (`passwd_args`), the fresh /tmp and /run
(`tmp_args`), the command server's and grading tools' binds (`server_binds`), the caller's
binds and the workspace (`user_binds`), the seccomp filter and the command (`command_args`).
`bwrap_args` puts them in order: bwrap mounts in argument order, so a later mount lands on
(or inside) an earlier one, and each function's place in that order is part of what it means.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes import network
from skyrl_sdk.sandboxes._native import (
    GRADING_HELPER_INSIDE,
    GRADING_SHIM_INSIDE,
    INSIDE_PATH,
    GradingTools,
)
from skyrl_sdk.sandboxes._process import SANDBOX_UID
from skyrl_sdk.sandboxes.cow_root import CowRoot
from skyrl_sdk.sandboxes.spec import (
    AGENT_UID,
    VERIFIER_HOST_UID,
    BackendUnavailable,
    SandboxError,
    SandboxSpec,
)

# The verifier's capabilities inside its user namespace: change uid (the drop to the agent's),
# write and own the agent's files as Docker's root does, and end the agent's processes.
# Nothing else: no CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP.
VERIFIER_CAPS = (
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_DAC_OVERRIDE",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_KILL",
)
VERIFIER_HOME = "/run/verifier-home"
"""The verifier's HOME in a two-uid grading sandbox when the caller asked for
`grading.GRADING_HOME` (/tmp, which the agent's programs can write there): its own 0700
directory. Agent programs the verifier runs get HOME=/tmp instead."""
# What the helper's `init` (bwrap's command, before the command server) needs and then drops:
# remounting /proc with hidepid, and shrinking the bounding set to VERIFIER_CAPS.
_INIT_CAPS = ("CAP_SYS_ADMIN", "CAP_SETPCAP")
# A build sandbox's uid 0 (a copy-on-write root's build, `build_as_root`): own and write the
# root's files, switch users for package managers that drop privileges (apt's _apt), and kill.
BUILD_CAPS = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETUID", "CAP_SETGID", "CAP_KILL")

# With `spec.rootfs` (an image's root), every top-level entry is shown except these: the
# kernel filesystems and /tmp, /run are fresh, and per-user directories stay hidden.
_HIDDEN = {"proc", "dev", "tmp", "run", "root", "home", "lost+found", "sys"}

# Without `spec.rootfs`, the sandbox sees only this much of the host: the programs and their
# libraries...
_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# ...and from /etc what programs need to start, resolve users, load libraries, verify TLS
# and tell the time. resolv.conf is added only when the sandbox has network.
_ETC_FILES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "services",
    "ssl",
)
_ETC_NETWORK_FILES = ("resolv.conf",)
_RUN_TMPFS_BYTES = 64 << 20  # /run holds sockets and pid files, not data


@cache
def bwrap_path() -> str:
    """The bwrap binary, or `BackendUnavailable` saying how to install it."""
    found = shutil.which("bwrap")
    if not found:
        raise BackendUnavailable(
            "the bwrap backend needs bubblewrap: install the Debian package 'bubblewrap' "
            "(apt-get install bubblewrap; `make install` does it as root), or use backend='local' "
            "for trusted code"
        )
    return found


@cache
def bwrap_version() -> tuple[int, ...]:
    """The installed bwrap's version, e.g. (0, 8, 0); (0,) if it cannot be told."""
    import subprocess

    try:
        out = subprocess.run(
            [bwrap_path(), "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        return tuple(int(x) for x in out.split()[-1].split("."))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return (0,)


def _visible(path: str) -> bool:
    """True if an absolute host path lies inside what `_system_binds` shows."""
    parts = path.strip("/").split("/")
    if parts[0] in _SYSTEM_DIRS:
        return True
    return parts[0] == "etc" and len(parts) > 1 and parts[1] in _ETC_FILES


def _symlink_or_bind(host: str) -> list[str]:
    """Keep a symlink a symlink when its target is visible in the sandbox; otherwise bind the
    file it points to (e.g. /etc/resolv.conf -> /run/systemd/resolve/..., /run is fresh)."""
    if not os.path.islink(host):
        return ["--ro-bind", host, host]
    resolved = os.path.realpath(host)
    if _visible(resolved):
        return ["--symlink", os.readlink(host), host]
    return ["--ro-bind", resolved, host] if os.path.exists(resolved) else []


@cache
def _system_binds(network: bool) -> tuple[str, ...]:
    """The minimal read-only system taken from the host root (see `_SYSTEM_DIRS`)."""
    args: list[str] = []
    for name in _SYSTEM_DIRS:
        path = f"/{name}"
        if os.path.islink(path):
            # Merged /usr: /bin -> usr/bin stays a symlink, as on the host.
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/etc"]
    names = _ETC_FILES + (_ETC_NETWORK_FILES if network else ())
    for name in sorted(names):
        path = f"/etc/{name}"
        if os.path.lexists(path):
            args += _symlink_or_bind(path)
    return tuple(args)


@cache
def _root_binds(root: str, skip_top: str) -> tuple[str, ...]:
    """Read-only binds of each top-level entry of an image root (so mount points can be made)."""
    args: list[str] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name in _HIDDEN or entry.name == skip_top:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), f"/{entry.name}"]
        elif entry.is_dir():
            args += ["--ro-bind", entry.path, f"/{entry.name}"]
    if os.path.isdir(os.path.join(root, "sys")):
        args += ["--ro-bind", os.path.join(root, "sys"), "/sys"]
    return tuple(args)


@dataclass(frozen=True)
class LaunchPlan:
    """What one sandbox's bwrap command line is made of (`BwrapSandbox._server_argv`)."""

    spec: SandboxSpec
    """The sandbox's spec."""
    workspace: Path
    """The workspace on the host, bound read-write at `workdir` (without a copy-on-write root)."""
    workdir: str
    """The working directory inside (no trailing slash)."""
    system: tuple[str, ...]
    """The system mounts (`system_mounts`)."""
    tools: GradingTools | None
    """The helper and shim of a two-uid grading sandbox; None: one uid (or not grading)."""
    cow: CowRoot | None
    """A copy-on-write root to run on, or None."""
    build_as_root: bool
    """A build sandbox (uid 0 of its own user namespace, `BUILD_CAPS`)."""
    server_binary: str | None
    """The native command server's binary on the host; None: the Python server."""
    networked: bool
    """The sandbox has network (in the namespace `network.wrap_launcher` makes)."""
    seccomp_fd: int | None
    """The descriptor of the seccomp program, or None where seccomp is not supported."""
    empty_fd: int
    """An empty file's descriptor, bound over /proc/cmdline."""
    passwd_fd: int | None
    """The descriptor of the generated /etc/passwd, or None (the root's own stays)."""


def check_launch(
    spec: SandboxSpec, cow: CowRoot | None, tools: GradingTools | None, build_as_root: bool
) -> None:
    """Refuse a sandbox that cannot be launched as asked, before anything is opened."""
    if spec.rootfs and not os.path.isdir(spec.rootfs):
        raise BackendUnavailable(f"SandboxSpec.rootfs {spec.rootfs!r} is not a directory")
    for path in spec.ro_binds:
        if not os.path.isdir(path):
            raise SandboxError(f"SandboxSpec.ro_binds: {path!r} is not a directory on the host")
    if cow is not None and os.geteuid() != 0:
        raise BackendUnavailable("a copy-on-write root needs root (it mounts overlays)")
    if build_as_root and (cow is None or tools is not None):
        raise SandboxError("a build sandbox needs a copy-on-write root and no grading")


def launcher_prefix(tools: GradingTools | None, build_as_root: bool) -> list[str]:
    """What runs bwrap: the grading helper (two uids), setpriv (as root) or nothing."""
    if tools is not None:
        # Two uids: the helper makes a user namespace (uid 0 = VERIFIER_HOST_UID, AGENT_UID
        # = itself) and execs bwrap as its uid 0, so bwrap runs privileged in there only.
        return [str(tools.helper), "launch", str(VERIFIER_HOST_UID), str(AGENT_UID), "--"]
    if os.geteuid() == 0 and not build_as_root:  # a build's bwrap maps uid 0 itself
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise BackendUnavailable(
                "running as root, the bwrap backend drops to uid 65534 with setpriv "
                "(package util-linux), which is missing"
            )
        return [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
    return []


def system_mounts(spec: SandboxSpec, cow: CowRoot | None, workdir: str) -> tuple[str, ...]:
    """The root the sandbox runs on: a copy-on-write root, an image's root or the host's
    minimal system."""
    top = workdir.strip("/").split("/")[0]
    if cow is not None:
        return ("--bind", str(cow.mountpoint), "/")
    if spec.rootfs:
        return _root_binds(spec.rootfs, top)
    return _system_binds(spec.network)


def namespace_args(plan: LaunchPlan) -> list[str]:
    """The namespaces bwrap makes, and the capabilities and uid kept in them."""
    if plan.build_as_root:
        return [
            "--unshare-all",
            *(["--share-net"] if plan.networked else []),
            *_userns_args(),
            "--uid",
            "0",
            "--gid",
            "0",
            "--cap-drop",
            "ALL",
            *(arg for cap in BUILD_CAPS for arg in ("--cap-add", cap)),
        ]
    if plan.tools is None:
        return [
            "--unshare-all",
            # Networked: keep the namespace `network.wrap_launcher` made (never the host's).
            *(["--share-net"] if plan.networked else []),
            *_userns_args(),
        ]
    # The user namespace is the helper's; nested ones are refused by the seccomp filter
    # (bwrap's --disable-userns needs --unshare-user).
    return [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *([] if plan.networked else ["--unshare-net"]),
        "--cap-drop",
        "ALL",
        # SYS_ADMIN and SETPCAP for the helper's `init` only (hidepid, bounding set).
        *(arg for cap in (*VERIFIER_CAPS, *_INIT_CAPS) for arg in ("--cap-add", cap)),
    ]


def proc_args(plan: LaunchPlan) -> list[str]:
    """A fresh /proc, a build's guards on the host's kernel files, an empty /proc/cmdline,
    and read-only in grading."""
    return [
        "--proc",
        "/proc",
        *(_build_proc_guards() if plan.build_as_root else ()),
        # Grading: no process may open a /proc file for writing (e.g. /proc/PID/mem of
        # the verifier's shell, to rewrite its code).
        "--perms",
        "0444",
        "--ro-bind-data",
        str(plan.empty_fd),
        "/proc/cmdline",
        *(["--remount-ro", "/proc"] if plan.spec.grading else []),
    ]


def passwd_args(plan: LaunchPlan) -> list[str]:
    """The generated /etc/passwd over the root's, when there is one."""
    if plan.passwd_fd is None:
        return []
    return ["--perms", "0644", "--ro-bind-data", str(plan.passwd_fd), "/etc/passwd"]


def tmp_args(plan: LaunchPlan) -> list[str]:
    """A fresh, size-capped /tmp, and /run."""
    spec = plan.spec
    return [
        # A copy-on-write root has /tmp on the root's filesystem (rename from the
        # workspace works); grading still gets a fresh one (nothing the agent left there).
        *(
            []
            if plan.cow is not None and not spec.grading
            else [
                *_sized(spec.disk_bytes),
                # Two uids: /tmp is the verifier's, sticky and open to all, as in Docker.
                *(["--perms", "1777"] if plan.tools is not None else []),
                "--tmpfs",
                "/tmp",
            ]
        ),
        *_sized(min(spec.disk_bytes or _RUN_TMPFS_BYTES, _RUN_TMPFS_BYTES)),
        "--tmpfs",
        "/run",
    ]


def server_binds(plan: LaunchPlan) -> list[str]:
    """The native command server and a two-uid sandbox's helper and shim, read-only, and
    the verifier's HOME (on the fresh /run, so after its tmpfs)."""
    tools = plan.tools
    return [
        # The native command server, read-only, on the fresh /run (after its tmpfs).
        *(["--ro-bind", plan.server_binary, INSIDE_PATH] if plan.server_binary else []),
        *(
            [
                "--perms",
                "0700",
                "--dir",
                VERIFIER_HOME,
                "--ro-bind",
                str(tools.helper),
                GRADING_HELPER_INSIDE,
                "--ro-bind",
                str(tools.shim),
                GRADING_SHIM_INSIDE,
            ]
            if tools is not None
            else []
        ),
    ]


def user_binds(plan: LaunchPlan) -> list[str]:
    """The caller's read-only binds and the workspace (a copy-on-write root holds its own)."""
    return [
        *(arg for path in plan.spec.ro_binds for arg in ("--ro-bind", path, path)),
        *([] if plan.cow is not None else ["--bind", str(plan.workspace), plan.workdir]),
    ]


def command_args(plan: LaunchPlan, python_args: list[str]) -> list[str]:
    """The working directory, the seccomp filter, and the command bwrap runs: the command
    server (through the helper's `init` with two uids)."""
    seccomp_fd, tools = plan.seccomp_fd, plan.tools
    return [
        "--chdir",
        plan.workdir,
        # Two uids: the helper's `init` loads the filter, after its remount of /proc.
        *([] if seccomp_fd is None or tools is not None else ["--seccomp", str(seccomp_fd)]),
        "--",
        *(
            []
            if tools is None
            else [
                GRADING_HELPER_INSIDE,
                "init",
                str(-1 if seccomp_fd is None else seccomp_fd),
                "--",
            ]
        ),
        *([INSIDE_PATH] if plan.server_binary else [plan.spec.python, *python_args]),
    ]


def bwrap_args(plan: LaunchPlan, python_args: list[str]) -> list[str]:
    """bwrap and its arguments, in bwrap's order of mounts (a later one lands on an
    earlier one): the root, /proc, /etc/passwd, /dev, /tmp and /run, what is bound on the
    fresh /run, the caller's binds and the workspace, then the command."""
    namespaces = namespace_args(plan)
    return [
        bwrap_path(),
        *namespaces,
        "--new-session",
        "--as-pid-1",
        "--hostname",
        "sandbox",
        *plan.system,
        *network.bwrap_binds(plan.spec),
        *proc_args(plan),
        *passwd_args(plan),
        "--dev",
        "/dev",
        *tmp_args(plan),
        *server_binds(plan),
        *user_binds(plan),
        *command_args(plan, python_args),
    ]


_TWO_ARG_MOUNTS = ("--bind", "--ro-bind", "--dev-bind", "--bind-try", "--ro-bind-try")
_ONE_ARG_OPTIONS = (
    "--perms",
    "--size",
    "--hostname",
    "--uid",
    "--gid",
    "--seccomp",
    "--cap-add",
    "--cap-drop",
    "--sync-fd",
    "--info-fd",
    "--block-fd",
)


def mount_targets(args: list[str]) -> dict[str, bool]:
    """The paths bwrap mounts something on (path -> is a directory), outside what bwrap
    itself makes fresh (/proc, /dev, /run and a fresh /tmp), for `CowRoot.make_mountpoints`."""
    out: dict[str, bool] = {}
    fresh: list[str] = []
    i = 0
    while i < len(args) and args[i] != "--":
        op = args[i]
        if op in _TWO_ARG_MOUNTS or op == "--symlink":
            source, dest = args[i + 1], args[i + 2]
            if op != "--symlink" and dest != "/":
                out[dest] = os.path.isdir(source)
            i += 3
        elif op in ("--ro-bind-data", "--bind-data", "--file"):
            out[args[i + 2]] = False
            i += 3
        elif op in ("--tmpfs", "--proc", "--dev", "--dir", "--remount-ro", "--chdir"):
            if op in ("--tmpfs", "--proc", "--dev"):
                fresh.append(args[i + 1])
            if op != "--remount-ro":
                out[args[i + 1]] = True
            i += 2
        elif op in _ONE_ARG_OPTIONS:
            i += 2
        else:
            i += 1
    return {
        path: is_dir
        for path, is_dir in out.items()
        if not any(path != f and inside_path(path, f) for f in fresh)
    }


def inside_path(path: str, root: str) -> bool:
    """True when absolute `path` is `root` or below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


# A build sandbox's uid 0 is the host's root (`build_as_root`): to the kernel it is global
# root for every file-permission check, and the sysctls under /proc/sys, /proc/sysrq-trigger
# and the like check nothing more (bwrap covers them only where it can write the directory).
# So they are the host's, read-only, as Docker makes them, and the files that show kernel
# memory or keys are masked.
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi")
_PROC_MASKED = ("kcore", "keys", "timer_list", "sched_debug", "kallsyms", "kmsg")


@cache
def _build_proc_guards() -> tuple[str, ...]:
    args: list[str] = []
    for name in _PROC_READ_ONLY:
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in _PROC_MASKED:
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    return tuple(args)


def _passwd(rootfs: str | None, uid: int, home: str, shell: str) -> bytes | None:
    """The root's /etc/passwd with `uid`'s entry given `home` and `shell` (added if absent);
    None if the root has no regular /etc/passwd to cover."""
    path = os.path.join(rootfs or "/", "etc/passwd")
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    out, found = [], False
    for line in lines:
        fields = line.split(":")
        if len(fields) == 7 and fields[2] == str(uid) and not found:
            found = True
            fields[5], fields[6] = home, shell
            line = ":".join(fields)
        out.append(line)
    if not found:
        out.append(f"sandbox:x:{uid}:{uid}:sandbox:{home}:{shell}")
    return ("\n".join(out) + "\n").encode()


def _data_fd(data: bytes) -> int:
    """A readable descriptor (memfd at offset 0) holding `data`, for bwrap's --ro-bind-data."""
    fd = os.memfd_create("skyrl-data", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _sized(size: int | None) -> list[str]:
    """`--size N` for the next `--tmpfs` (bwrap >= 0.5), or nothing."""
    return ["--size", str(size)] if size else []


@cache
def _userns_args() -> tuple[str, ...]:
    """No nested user namespaces (bwrap >= 0.8); the seccomp filter refuses them as well."""
    return ("--unshare-user", "--disable-userns") if bwrap_version() >= (0, 8) else ()
