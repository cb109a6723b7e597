"""The default backend: Linux namespaces through bubblewrap (`bwrap`).

Each sandbox gets its own user, PID, mount, network, IPC, UTS and cgroup namespaces.

Filesystem: without `spec.rootfs` the sandbox sees a *minimal* read-only system taken from
the host: `/usr`, `/bin`, `/lib*`, `/sbin` (on merged-/usr systems the symlinks stay
symlinks) and from `/etc` only what programs need (`passwd`, `group`, `nsswitch.conf`,
`ld.so.cache`, `ld.so.conf(.d)`, `alternatives`, `ssl`, `ca-certificates`, `localtime`,
`hosts`, `host.conf`, `gai.conf`, `mime.types`, `protocols`, `services`, `os-release`;
`resolv.conf` only with network). Nothing else of the host is there: not the project's
checkout or virtualenv, not `/root`, `/home`, `/var`, `/opt`, `/mnt`, `/srv`, `/media`, `/work`,
nor the caller's working directory. With `spec.rootfs` (an image's root) that directory's own
top-level entries are bound read-only instead. Either way the sandbox gets fresh, size-capped
tmpfs `/tmp` (`spec.disk_bytes`) and `/run`, its own `/proc` and `/dev`, the writable
workspace, and the caller's `spec.ro_binds` at their own paths.

As in a container, the sandbox user's `/etc/passwd` entry (a generated copy of the root's,
bound read-only over it) has a login shell (/bin/bash where the root has it, else /bin/sh)
and the HOME its commands get (the workspace), and every command gets `SHELL` (so tmux and
screen panes start a shell rather than /usr/sbin/nologin).

Processes: started by root, the sandbox runs as the unprivileged user `nobody` (a real uid, so
root-owned host files stay out of reach even through /proc). The command server (the native
one, `_server.c`, bound read-only at /run/skyrl-server, unless it cannot be built here; see
`_native.py`) is the namespace's PID 1: when it exits, the kernel kills everything left inside. It makes itself
non-dumpable, so the commands it runs (same uid) cannot ptrace it or open `/proc/1/mem` or
its pipes to the host under `/proc/1/fd`; a seccomp filter (`seccomp.py`) allows ptrace of
the sandbox's own (dumpable, same-uid) processes as Docker does, and refuses
nested user namespaces, keyctl, bpf, perf_event_open, mounts, userfaultfd and kexec, and
bwrap >= 0.8 also disables user namespaces (`--disable-userns`).

Grading (`SandboxSpec(grading=True)`): /proc is read-only, and as root the sandbox has two
uids (`GradingIsolation.TWO_UID`). The helper of `_grading.c` (exec'd after the cgroup join,
in place of setpriv) clears root's supplementary groups and unshares a user namespace whose
uid 0 is host uid `VERIFIER_HOST_UID` and whose uid 65534 is host uid `AGENT_UID` (nothing
else is mapped), then execs bwrap as its uid 0; bwrap runs privileged in that namespace only,
makes the pid, mount, ipc, uts, cgroup (and, without network, net) namespaces as usual and
keeps six capabilities (`VERIFIER_CAPS`: setuid, setgid, dac_override, chown, fowner, kill)
for the command server and the commands it runs: the verifier, which may write the agent's
workspace as Docker's root does. Every command starts through the helper's `exec` mode and
has the exec shim in LD_PRELOAD; a program the verifier execs from an agent-writable path
(and an interpreter or git or make given agent files) runs as `AGENT_UID` with no
capabilities. The seccomp filter and the non-dumpable server stay; nested user namespaces
are refused by the filter (`--disable-userns` needs bwrap's own --unshare-user). /tmp is
then 1777 (Docker's), and the verifier's HOME=/tmp becomes `VERIFIER_HOME`. Not root, no C
compiler, or `$SKYRL_GRADING_UIDS=off`: one uid (`SINGLE_UID`), with one warning per process.

Every sandbox's /proc/cmdline is an empty read-only file (the host kernel's command line is
not shown). What /proc/self/mountinfo still shows of the host: the source paths of bind
mounts (the command server's and grading helper's cache paths under /tmp/skyrl-server-0/,
a caller's `workspace_dir`, `ro_binds`), the host's block device and its mount options.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes import _native, network, seccomp
from skyrl_sdk.sandboxes._native import (
    GRADING_HELPER_INSIDE,
    GRADING_SHIM_INSIDE,
    INSIDE_PATH,
    GradingTools,
)
from skyrl_sdk.sandboxes._process import SANDBOX_UID, ServerSandbox
from skyrl_sdk.sandboxes.cow_root import CowRoot
from skyrl_sdk.sandboxes.grading import GRADING_HOME
from skyrl_sdk.sandboxes.network import NetworkMode
from skyrl_sdk.sandboxes.spec import (
    AGENT_UID,
    VERIFIER_HOST_UID,
    BackendUnavailable,
    GradingIsolation,
    SandboxError,
)

GRADING_UIDS_ENV = "SKYRL_GRADING_UIDS"
"""Set to `off` to run grading sandboxes with one uid (`GradingIsolation.SINGLE_UID`) even
where two are available (for tests and for comparing)."""
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
_log = logging.getLogger(__name__)
_warned_single_uid = False

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


class BwrapSandbox(ServerSandbox):
    """A bubblewrap sandbox (see the module docstring)."""

    backend = "bwrap"

    def __init__(self, spec=None):
        super().__init__(spec)
        # The helper and shim of a two-uid grading sandbox; None: one uid (or not grading).
        self._grading_tools: GradingTools | None = None
        self._isolation = (
            GradingIsolation.SINGLE_UID if self.spec.grading else GradingIsolation.NOT_GRADING
        )
        self.cow_root: CowRoot | None = None
        """A copy-on-write root (`cow_root.CowRoot`) to run on instead of the read-only system
        binds, the tmpfs /tmp (kept for grading) and the workspace bind (the workspace is a
        directory of that root); set before `start`. Needs root."""
        self.build_as_root = False
        """A build sandbox (with `cow_root`): commands run as uid 0 of a user namespace that
        maps only uid 0 to the host's root, with `BUILD_CAPS` only, so a Dockerfile's RUN
        steps can write the root's system directories (into the overlay's upper layer)."""

    @property
    def grading_isolation(self) -> GradingIsolation:
        """`TWO_UID` when this grading sandbox runs agent programs under `AGENT_UID` and the
        verifier under a uid of its own (known once started); see `GradingIsolation`."""
        return self._isolation

    def _pick_grading(self) -> GradingTools | None:
        """The tools of a two-uid grading sandbox, or None (with the reason logged once)."""
        reason = None
        if os.environ.get(GRADING_UIDS_ENV, "").strip().lower() == "off":
            reason = f"${GRADING_UIDS_ENV}=off"
        elif os.geteuid() != 0:
            reason = "not running as root (a second uid needs root to map it)"
        else:
            try:
                tools = _native.build_grading()
                if self.spec.rootfs and not tools.static:
                    raise BackendUnavailable("the grading helper is not static (no libc.a)")
                return tools
            except BackendUnavailable as e:
                reason = str(e)
        _warn_single_uid(reason)
        return None

    @property
    def workdir(self) -> str:
        return self.spec.workdir.rstrip("/")

    @property
    def shell(self) -> str:
        """The login shell of the sandbox user and `$SHELL` of its commands, as in a
        container: /bin/bash where the root has it, else /bin/sh."""
        return _shell(self.spec.rootfs or "/")

    def base_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The common environment, plus `SHELL` (`shell`) unless the caller gives one."""
        env = super().base_env(extra)
        env.setdefault("SHELL", self.shell)
        return env

    def _inside_uid(self) -> int:
        """The uid commands run as inside (as root: `SANDBOX_UID`; else bwrap keeps ours)."""
        if self.build_as_root:
            return 0
        return SANDBOX_UID if os.geteuid() == 0 else os.getuid()

    @property
    def _run_as(self) -> int | None:
        if self.build_as_root:
            return None
        return SANDBOX_UID if os.geteuid() == 0 else None

    async def _launch(self) -> None:
        if self.spec.grading:
            if _native.grading_settled() or os.geteuid() != 0:
                self._grading_tools = self._pick_grading()
            else:  # the first grading start of this process may compile: off the event loop
                self._grading_tools = await asyncio.to_thread(self._pick_grading)
        await super()._launch()
        if self._proc is not None:  # networked: pasta configures the namespace meanwhile
            try:
                await network.wait_ready(self.spec, self._proc.pid)
            except SandboxError as e:
                raise SandboxError(f"{e}{self._log_tail()}") from None
        if self._grading_tools is not None:
            self._isolation = GradingIsolation.TWO_UID
            if self.spec.rootfs and not await self._shim_loads():
                # Commands run as they are (as the verifier, with read-only /proc): a shim
                # the image's libc refuses could stop every program from starting.
                self._grading_tools = None
                self._isolation = GradingIsolation.SINGLE_UID
                _warn_single_uid(
                    f"the exec shim does not load in the image root {self.spec.rootfs}"
                )

    async def _shim_loads(self) -> bool:
        """True if the exec shim loads into the root's /bin/sh (an image's libc may be too
        old for it, or its sh static): its constructor answers the probe variable."""
        probe = await self.exec(["/bin/sh", "-c", ":"], env={"SKYRL_GRADING_SHIM_PROBE": "1"})
        return "skyrl-grading-shim-ok" in probe.stdout

    def _command(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        if self._grading_tools is None:
            return argv, env
        # Two uids: the first program goes through the helper's decision (the command server
        # is static and loads no shim), and every later exec through the shim.
        if env.get("HOME") == GRADING_HOME:
            # /tmp is open to the agent's programs here: a .gitconfig or other dotfile one of
            # them leaves there must not configure the verifier's later commands.
            env = {**env, "HOME": VERIFIER_HOME}
        preload = env.get("LD_PRELOAD", "")
        env = {
            **env,
            "LD_PRELOAD": f"{GRADING_SHIM_INSIDE}:{preload}" if preload else GRADING_SHIM_INSIDE,
        }
        return [GRADING_HELPER_INSIDE, "exec", "--", *argv], env

    def _interpreter_key(self) -> tuple[str, ...]:
        return (self.backend, self.spec.rootfs or "/", self.spec.python)

    def _server_needs_static(self) -> bool:
        # An image root need not carry the host's libc.
        return bool(self.spec.rootfs)

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        spec = self.spec
        if spec.rootfs and not os.path.isdir(spec.rootfs):
            raise BackendUnavailable(f"SandboxSpec.rootfs {spec.rootfs!r} is not a directory")
        for path in spec.ro_binds:
            if not os.path.isdir(path):
                raise SandboxError(f"SandboxSpec.ro_binds: {path!r} is not a directory on the host")
        prefix: list[str] = []
        tools = self._grading_tools
        cow = self.cow_root
        if cow is not None and os.geteuid() != 0:
            raise BackendUnavailable("a copy-on-write root needs root (it mounts overlays)")
        if self.build_as_root and (cow is None or tools is not None):
            raise SandboxError("a build sandbox needs a copy-on-write root and no grading")
        if tools is not None:
            # Two uids: the helper makes a user namespace (uid 0 = VERIFIER_HOST_UID, AGENT_UID
            # = itself) and execs bwrap as its uid 0, so bwrap runs privileged in there only.
            prefix = [str(tools.helper), "launch", str(VERIFIER_HOST_UID), str(AGENT_UID), "--"]
        elif os.geteuid() == 0 and not self.build_as_root:  # a build's bwrap maps uid 0 itself
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                raise BackendUnavailable(
                    "running as root, the bwrap backend drops to uid 65534 with setpriv "
                    "(package util-linux), which is missing"
                )
            prefix = [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
        top = self.workdir.strip("/").split("/")[0]
        if cow is not None:
            system: tuple[str, ...] = ("--bind", str(cow.mountpoint), "/")
        elif spec.rootfs:
            system = _root_binds(spec.rootfs, top)
        else:
            system = _system_binds(spec.network)
        # ptrace as Docker allows it, except where agent programs share the verifier's uid.
        allow_trace = not spec.grading or tools is not None
        seccomp_fd = seccomp.filter_fd(allow_trace) if seccomp.supported() else None
        # An empty file over /proc/cmdline (the host kernel's command line): bwrap copies
        # what it reads from this descriptor into a file of its own, so no host path shows.
        empty_fd = os.open(os.devnull, os.O_RDONLY)
        # /etc/passwd as a container's: the sandbox user has a login shell and the HOME its
        # commands get (tmux and screen start the login shell in each pane).
        passwd = (
            None
            if self.build_as_root  # a build may add users (useradd writes /etc/passwd)
            else _passwd(spec.rootfs, self._inside_uid(), self.workdir, self.shell)
        )
        passwd_fd = _data_fd(passwd) if passwd is not None else None
        # Closed by the caller once the server is spawned.
        self._pass_fds = tuple(fd for fd in (empty_fd, passwd_fd, seccomp_fd) if fd is not None)
        self._seccomp_loaded = seccomp_fd is not None
        networked = network.network_mode(spec) is not NetworkMode.NONE
        if self.build_as_root:
            self._userns_disabled = bool(_userns_args())
            namespaces = [
                "--unshare-all",
                *(["--share-net"] if networked else []),
                *_userns_args(),
                "--uid",
                "0",
                "--gid",
                "0",
                "--cap-drop",
                "ALL",
                *(arg for cap in BUILD_CAPS for arg in ("--cap-add", cap)),
            ]
        elif tools is None:
            self._userns_disabled = bool(_userns_args())
            namespaces = [
                "--unshare-all",
                # Networked: keep the namespace `network.wrap_launcher` made (never the host's).
                *(["--share-net"] if networked else []),
                *_userns_args(),
            ]
        else:
            # The user namespace is the helper's; nested ones are refused by the seccomp filter
            # (bwrap's --disable-userns needs --unshare-user).
            namespaces = [
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup-try",
                *([] if networked else ["--unshare-net"]),
                "--cap-drop",
                "ALL",
                # SYS_ADMIN and SETPCAP for the helper's `init` only (hidepid, bounding set).
                *(arg for cap in (*VERIFIER_CAPS, *_INIT_CAPS) for arg in ("--cap-add", cap)),
            ]
        args = [
            bwrap_path(),
            *namespaces,
            "--new-session",
            "--as-pid-1",
            "--hostname",
            "sandbox",
            *system,
            *network.bwrap_binds(spec),
            "--proc",
            "/proc",
            *(_build_proc_guards() if self.build_as_root else ()),
            # Grading: no process may open a /proc file for writing (e.g. /proc/PID/mem of
            # the verifier's shell, to rewrite its code).
            "--perms",
            "0444",
            "--ro-bind-data",
            str(empty_fd),
            "/proc/cmdline",
            *(["--remount-ro", "/proc"] if spec.grading else []),
            *(
                ["--perms", "0644", "--ro-bind-data", str(passwd_fd), "/etc/passwd"]
                if passwd_fd is not None
                else []
            ),
            "--dev",
            "/dev",
            # A copy-on-write root has /tmp on the root's filesystem (rename from the
            # workspace works); grading still gets a fresh one (nothing the agent left there).
            *(
                []
                if cow is not None and not spec.grading
                else [
                    *_sized(spec.disk_bytes),
                    # Two uids: /tmp is the verifier's, sticky and open to all, as in Docker.
                    *(["--perms", "1777"] if tools is not None else []),
                    "--tmpfs",
                    "/tmp",
                ]
            ),
            *_sized(min(spec.disk_bytes or _RUN_TMPFS_BYTES, _RUN_TMPFS_BYTES)),
            "--tmpfs",
            "/run",
            # The native command server, read-only, on the fresh /run (after its tmpfs).
            *(["--ro-bind", self._server_binary, INSIDE_PATH] if self._server_binary else []),
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
            *(arg for path in spec.ro_binds for arg in ("--ro-bind", path, path)),
            *([] if cow is not None else ["--bind", str(workspace), self.workdir]),
            "--chdir",
            self.workdir,
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
            *([INSIDE_PATH] if self._server_binary else [spec.python, *python_args]),
        ]
        if cow is not None:
            cow.make_mountpoints(mount_targets(args[1:]))
            prefix = cow.launcher() + prefix
        return network.wrap_launcher(spec, prefix + args, keep_fds=self._pass_fds)

    def _tmp_cap(self) -> str:
        return "tmpfs" if self.spec.disk_bytes else "none"


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


def _warn_single_uid(reason: str) -> None:
    """One warning per process: grading runs agent programs with the verifier's uid."""
    global _warned_single_uid
    if not _warned_single_uid:
        _warned_single_uid = True
        _log.warning(
            "grading sandboxes run with a single uid (%s): agent programs the verifier runs "
            "share its uid; callers note `single_uid` on each trial",
            reason,
        )


@cache
def _shell(root: str) -> str:
    """/bin/bash if the root has it (an executable file, through its own /bin), else /bin/sh."""
    for name in ("bin/bash", "usr/bin/bash"):
        path = os.path.join(root, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return "/bin/bash"
    return "/bin/sh"


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
