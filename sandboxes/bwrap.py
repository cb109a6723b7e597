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
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes import _bwrap_argv, _native, network, seccomp
from skyrl_sdk.sandboxes._bwrap_argv import (  # noqa: F401 - some only re-exported, as before
    _ETC_FILES,
    _ETC_NETWORK_FILES,
    BUILD_CAPS,
    VERIFIER_CAPS,
    VERIFIER_HOME,
    _data_fd,
    _passwd,
    _userns_args,
    bwrap_path,
    bwrap_version,
    inside_path,
    mount_targets,
)
from skyrl_sdk.sandboxes._native import GRADING_HELPER_INSIDE, GRADING_SHIM_INSIDE, GradingTools
from skyrl_sdk.sandboxes._process import SANDBOX_UID, ServerSandbox
from skyrl_sdk.sandboxes.cow_root import CowRoot
from skyrl_sdk.sandboxes.grading import GRADING_HOME
from skyrl_sdk.sandboxes.network import NetworkMode
from skyrl_sdk.sandboxes.spec import BackendUnavailable, GradingIsolation, SandboxError

GRADING_UIDS_ENV = "SKYRL_GRADING_UIDS"
"""Set to `off` to run grading sandboxes with one uid (`GradingIsolation.SINGLE_UID`) even
where two are available (for tests and for comparing)."""
_log = logging.getLogger(__name__)
_warned_single_uid = False


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
        tools = self._grading_tools
        cow = self.cow_root
        _bwrap_argv.check_launch(spec, cow, tools, self.build_as_root)
        prefix = _bwrap_argv.launcher_prefix(tools, self.build_as_root)
        system = _bwrap_argv.system_mounts(spec, cow, self.workdir)
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
        if tools is None:  # a build too (it has no grading tools)
            self._userns_disabled = bool(_userns_args())
        plan = _bwrap_argv.LaunchPlan(
            spec=spec,
            workspace=workspace,
            workdir=self.workdir,
            system=system,
            tools=tools,
            cow=cow,
            build_as_root=self.build_as_root,
            server_binary=self._server_binary,
            networked=networked,
            seccomp_fd=seccomp_fd,
            empty_fd=empty_fd,
            passwd_fd=passwd_fd,
        )
        args = _bwrap_argv.bwrap_args(plan, python_args)
        if cow is not None:
            cow.make_mountpoints(mount_targets(args[1:]))
            prefix = cow.launcher() + prefix
        return network.wrap_launcher(spec, prefix + args, keep_fds=self._pass_fds)

    def _tmp_cap(self) -> str:
        return "tmpfs" if self.spec.disk_bytes else "none"


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
