"""Opening a sandbox of a Harbor trial: the agent phase's or the verifier's, on the trial's
working directory, with its Harbor paths bound (bwrap: `BoundBwrap`) or made (docker)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from skyrl_gym.envs.harbor.errors import TaskEnvironmentError
from skyrl_gym.envs.harbor.trial_paths import (
    AGENT_LOGS,
    ARTIFACTS,
    LOGS,
    SOLUTION,
    TESTS,
    VERIFIER_LOGS,
)
from skyrl_sdk.sandboxes import VERIFIER_HOST_UID, Backend, Sandbox, SandboxSpec
from skyrl_sdk.sandboxes.bwrap import BwrapSandbox, mount_targets

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime


class BoundBwrap(BwrapSandbox):
    """A bwrap sandbox with extra host paths bound at given paths (read-write `binds`, then
    read-only `ro_binds`, which may lie inside them). A grading one (`spec.grading`) has a
    read-only /proc and, as root, a uid of its own for the verifier (`GradingIsolation`).
    `mount_at`: where the workspace is mounted, a directory above `spec.workdir` (the cwd), as
    a container's `WORKDIR /app` ... `WORKDIR /app/sub` keeps /app (None: at `spec.workdir`)."""

    def __init__(
        self,
        spec: SandboxSpec,
        binds: Mapping[str, Path],
        *,
        ro_binds: Mapping[str, Path] | None = None,
        mount_at: str | None = None,
    ):
        super().__init__(spec)
        self._binds = dict(binds)
        self._ro_binds = dict(ro_binds or {})
        self._mount_at = mount_at

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        argv = super()._server_argv(workspace, python_args)
        at = argv.index("--chdir")
        if self._mount_at is not None and argv[at - 3 : at] == [
            "--bind",
            str(workspace),
            self.spec.workdir,
        ]:
            argv[at - 1] = self._mount_at
        extra = [
            a
            for inside_path, host in self._binds.items()
            for a in ("--bind", str(host), inside_path)
        ]
        extra += [
            a
            for inside_path, host in self._ro_binds.items()
            for a in ("--ro-bind", str(host), inside_path)
        ]
        if self.cow_root is not None:  # mount points in a root-owned root: made by root now
            self.cow_root.make_mountpoints(mount_targets(extra))
            logs = self.cow_root.upper_of(LOGS)
            if logs.is_dir() and not logs.is_symlink():
                # Two-uid grading: /logs is the verifier's alone (0700), as bwrap made it in
                # the read-only layout, so the agent's programs cannot even read a verdict.
                two_uid = self.spec.grading and self._grading_tools is not None
                owner = VERIFIER_HOST_UID if two_uid else 0
                os.chown(logs, owner, owner, follow_symlinks=False)
                logs.chmod(0o700 if two_uid else 0o755)
        return argv[:at] + extra + argv[at:]

    def charge_files(self) -> list[Path]:
        """The sandbox's `cgroup.procs` files: a host process that writes its pid there is
        charged to the sandbox's memory, pids and CPU caps (how set-up copies are)."""
        return self._cgroups.procs_files()

    def oom_kill_count(self) -> int:
        """How many processes the sandbox's memory cgroup has killed so far."""
        return self._cgroups.oom_kills()


async def open_sandbox(
    rt: HarborRuntime,
    binds: Mapping[str, Path],
    env: Mapping[str, str],
    *,
    grading: bool = False,
    ro_binds: Mapping[str, Path] | None = None,
) -> Sandbox:
    """Start a sandbox of the trial `rt` with `binds` (and read-only `ro_binds`) at their
    inside paths, `env` its variables; `grading`: the verifier's (`SandboxSpec.grading`)."""
    spec = rt._spec(env, grading=grading)
    if rt.backend is Backend.BWRAP:
        # Passed only when it differs (tests wrap `BoundBwrap.__init__` without it).
        above = {} if rt.mount_dir == rt.workdir else {"mount_at": rt.mount_dir}
        # A copy-on-write root has the writable directories in itself: nothing to bind.
        roots = {} if rt.cow is not None else rt.roots
        bound = BoundBwrap(spec, {**roots, **binds}, ro_binds=ro_binds, **above)
        bound.cow_root = rt.cow
        sandbox: Sandbox = bound
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
    else:
        from skyrl_sdk.sandboxes.docker_backend import DockerSandbox

        above = None if rt.mount_dir == rt.workdir else rt.mount_dir
        sandbox = DockerSandbox(spec, mount_at=above, binds=rt.roots)
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        dirs = " ".join(rt._real(p) for p in (AGENT_LOGS, VERIFIER_LOGS, ARTIFACTS))
        made = await sandbox.exec(f"mkdir -p {dirs} {rt._real(TESTS)} {rt._real(SOLUTION)}")
        if not made.ok:
            await sandbox.close()
            raise TaskEnvironmentError(f"cannot create the /logs folders: {made.output[-500:]}")
    return sandbox
