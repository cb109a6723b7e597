"""The bwrap backend's agent phase environment: the Dockerfile read, then either the
trial's copy-on-write root over the task's built layer (`task_root`) or, without one, the
read-only system binds with a writable directory for each place the Dockerfile writes, and
the agent's sandbox opened (with /solution for the oracle)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from skyrl_gym.envs.harbor.dockerfile import (
    DockerfilePlan,
    inside,
    plan_dockerfile,
    writable_roots,
    write_dirs,
)
from skyrl_gym.envs.harbor.errors import BuildTimeoutError, TaskEnvironmentError, building
from skyrl_gym.envs.harbor.host import CopyJob
from skyrl_gym.envs.harbor.setup_steps import apply_steps, copy_into_workspace
from skyrl_gym.envs.harbor.task import DEFAULT_WORKDIR
from skyrl_gym.envs.harbor.task_root import base_for as task_base_for
from skyrl_gym.envs.harbor.task_root import build_task_root
from skyrl_gym.envs.harbor.trial_paths import (
    AGENT_LOGS,
    ARTIFACTS,
    SOLUTION,
    VERIFIER_LOGS,
    fresh_dir,
    give,
)
from skyrl_gym.envs.harbor.trial_sandbox import BoundBwrap
from skyrl_sdk.sandboxes import Sandbox, SandboxError, SandboxSpec
from skyrl_sdk.sandboxes.cow_root import CowRoot
from skyrl_sdk.sandboxes.cow_root import layout as cow_layout
from skyrl_sdk.sandboxes.cow_root import supported as cow_supported

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime

# Set to `binds` to run bwrap trials on read-only system binds, not a copy-on-write root.
ROOT_MODE_ENV = "SKYRL_HARBOR_ROOT"


def cow_root_problem(rt: HarborRuntime) -> str | None:
    """Why this trial cannot have a copy-on-write root (None: it can)."""
    if os.environ.get(ROOT_MODE_ENV, "").strip().lower() == "binds":
        return f"${ROOT_MODE_ENV}=binds"
    if rt.rootfs and any(c in rt.rootfs for c in ",:"):
        return f"the root {rt.rootfs!r} has ',' or ':' in its path (overlayfs options)"
    return cow_supported()


async def start_bwrap(rt: HarborRuntime, with_solution: bool) -> Sandbox:
    """bwrap: read the Dockerfile, lay out the trial's root (copy-on-write, else binds) and
    open the agent's sandbox; `with_solution`: /solution copied in (the oracle)."""
    task = rt.task
    plan = None
    cow_problem = cow_root_problem(rt)
    if task.dockerfile is not None:
        plan = plan_dockerfile(task.dockerfile, run_all=cow_problem is None)
        rt.notes.extend(plan.not_applied)
        if plan.workdir and not task.environment.workdir:
            rt.workdir = plan.workdir
        rt._env.update(plan.env)
        if task.environment.docker_image:
            # TB2's norm: the prebuilt image of this very Dockerfile. Never pulled here.
            rt.notes.append(
                f"docker_image {task.environment.docker_image}: not pulled by the bwrap "
                "backend; environment/Dockerfile is applied instead"
            )
    elif task.environment.docker_image:
        rt.notes.append(
            f"docker_image {task.environment.docker_image}: not used by the bwrap backend"
        )
    if rt.workdir.rstrip("/") in ("", "/proc", "/dev"):
        rt.notes.append(f"WORKDIR {rt.workdir}: not usable as a workspace; using /app")
        rt.workdir = DEFAULT_WORKDIR
    if cow_problem is None:
        with building(rt):  # the build stage's, apart from the sandbox's start
            await build_cow_root(rt, plan or DockerfilePlan(None, None))
    elif plan is not None:
        plan_roots(rt, plan)
    rt._env.update(task.environment.env)
    binds = {
        AGENT_LOGS: rt.agent_logs_dir,
        VERIFIER_LOGS: fresh_dir(rt._work / "agent-phase-verifier"),
        ARTIFACTS: rt.artifacts_dir,
    }
    solution = with_solution and task.solution_dir is not None
    if solution:
        binds[SOLUTION] = fresh_dir(rt._work / "solution")  # filled once started
    started = time.monotonic()
    deadline = started + task.environment.build_timeout_s
    sandbox = await rt._open(binds, rt._env)
    try:
        await rt._detect_shell(sandbox)
        if solution:
            assert task.solution_dir is not None
            job = CopyJob(task.solution_dir.resolve(), "", tree=True)
            await copy_into_workspace(
                rt, sandbox, [job], rt._work / "solution", deadline, "/solution"
            )
            rt.solution_uploaded = True
        if plan is not None and rt.cow is None:
            with building(rt):
                await apply_steps(rt, sandbox, plan.steps, deadline)
    except BaseException:
        await sandbox.close()
        raise
    return sandbox


async def build_cow_root(rt: HarborRuntime, plan: DockerfilePlan) -> None:
    """Get the task's built layer (built once, cached: `task_root`) and lay out this
    trial's copy-on-write root over it; the workspace is its `mount_dir`."""
    roots, _ = writable_roots(write_dirs(plan, rt.workdir))
    rt.mount_dir = next((r for r in roots if inside(rt.workdir, r)), rt.workdir)
    network = rt._spec({}).network
    env = dict(rt._env)

    def spec_for(workdir: str, disk_bytes: int) -> SandboxSpec:
        base = rt._spec(env)
        memory = min((base.memory_bytes or 0) + disk_bytes, rt._maxima.memory_bytes)
        # The task's own settings only: no agent binds or forwarded ports in a build.
        return dataclasses.replace(
            base,
            workdir=workdir,
            memory_bytes=memory,
            disk_bytes=None,
            grading=False,
            ro_binds=(),
            forward_ports=(),
        )

    async def open_build(spec: SandboxSpec, cow: CowRoot, ro_binds: Mapping[str, Path]) -> Sandbox:
        ws = cow.mountpoint.parent / "ws"
        ws.mkdir(exist_ok=True)
        spec = dataclasses.replace(spec, workspace_dir=str(ws))
        sandbox = BoundBwrap(spec, {}, ro_binds=ro_binds)
        sandbox.cow_root = cow
        sandbox.build_as_root = True
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    task = rt.task
    try:
        built, cache = await asyncio.to_thread(
            build_task_root,
            dockerfile=task.dockerfile,
            context=task.environment_dir,
            plan=plan,
            workdir=rt.workdir,
            mount_dir=rt.mount_dir,
            rootfs=rt.rootfs,
            network=network,
            spec_for=spec_for,
            open_sandbox=open_build,
            build_timeout_s=task.environment.build_timeout_s,
        )
    except TimeoutError as e:
        raise BuildTimeoutError(
            f"{e} ran past build_timeout_sec={task.environment.build_timeout_s}"
        ) from None
    except (OSError, SandboxError) as e:
        raise TaskEnvironmentError(f"building the task's root failed: {e}") from None
    rt._root_hold = cache.hold(built.key)
    rt._root_hold.__enter__()
    rt.built_root = built
    rt.notes.extend(built.notes)
    cow_dir = rt._work / "cow"
    rt.cow = cow_layout(
        upper=cow_dir / "up",
        work=cow_dir / "work",
        mountpoint=cow_dir / "merged",
        layer=built.layer,
        host=task_base_for(rt.rootfs),
        rootfs=rt.rootfs,
    )
    rt._app = rt.cow.upper_of(rt.mount_dir)
    rt._app.mkdir(parents=True, exist_ok=True)
    give(rt._app)
    for root in built.writable[1:]:  # where agent_writable looks
        rt.roots[root] = rt.cow.upper_of(root)


def plan_roots(rt: HarborRuntime, plan: DockerfilePlan) -> None:
    """Lay out the writable directories a container of this Dockerfile has: the workspace
    at the top of the working directory (`/app` for `WORKDIR /app/sub`), and one
    directory in the trial's workspace (so under its disk cap) for each other place its
    COPYs and RUNs write (`/data`, `/build`, `/opt/tool`). Below a read-only directory of
    the root (`/usr/local/bin`) it is a note."""
    existing = {e.name for e in os.scandir(rt.rootfs)} if rt.rootfs else set()
    # Shown read-only from the host (or the image root): no mount point can be made inside.
    readonly = existing or {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
    roots, _ = writable_roots(write_dirs(plan, rt.workdir), existing)
    primary = next((r for r in roots if inside(rt.workdir, r)), rt.workdir)
    rt.mount_dir = primary
    for root in roots:
        if inside(root, primary) or inside(primary, root):
            continue
        parts = PurePosixPath(root).parts[1:]
        if len(parts) > 1 and parts[0] in readonly:
            # No mount point can be made there, and an empty directory mounted over an
            # existing one would hide the system's files: left to a copy-on-write root.
            rt.notes.append(
                f"Dockerfile writes to {root}: below the read-only /{parts[0]} of the "
                "root filesystem; not applied"
            )
            continue
        host = rt._work / "roots" / root.strip("/").replace("/", "__")
        host.parent.mkdir(exist_ok=True)
        host.parent.chmod(0o755)
        rt.roots[root] = fresh_dir(host)
    if primary != rt.workdir:
        below = rt.app_dir / PurePosixPath(rt.workdir).relative_to(primary)
        below.mkdir(parents=True, exist_ok=True)
        give(rt.app_dir)
