"""A Dockerfile's COPY and RUN steps applied in the agent's sandbox before it starts (the
bwrap backend without a copy-on-write root), and host files copied into the trial's workspace
by a child process charged to the sandbox's cgroups (`host.charged_copy`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from skyrl_gym.envs.harbor.dockerfile import SetupStep, StepKind, inside, match_sources
from skyrl_gym.envs.harbor.errors import BuildTimeoutError, TaskEnvironmentError
from skyrl_gym.envs.harbor.host import CopyError, CopyJob, charged_copy
from skyrl_gym.envs.harbor.trial_paths import SANDBOX_UID, give
from skyrl_gym.envs.harbor.trial_sandbox import BoundBwrap
from skyrl_sdk.sandboxes import DEFAULT_DISK_BYTES, Sandbox

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime


def workspace_root(rt: HarborRuntime, path: str) -> tuple[str, Path] | None:
    """(inside root, host directory) of the writable directory holding `path`, if any."""
    norm = os.path.normpath(path)
    if inside(norm, rt.mount_dir):
        return rt.mount_dir, rt.app_dir
    return next(((r, h) for r, h in rt.roots.items() if inside(norm, r)), None)


async def apply_steps(
    rt: HarborRuntime, sandbox: Sandbox, steps: Sequence[SetupStep], deadline: float
) -> None:
    """Run the Dockerfile's `steps` in the agent's sandbox before it starts (binds layout):
    a COPY where no writable directory holds it, or a failed RUN, is a note; past
    `deadline` (build_timeout_sec) `TaskEnvironmentError`."""
    context = rt.task.environment_dir
    for step in steps:
        where = f"Dockerfile:{step.line} {step.kind.value.upper()}"
        if step.kind is StepKind.COPY:
            if workspace_root(rt, step.dest.rstrip("/") or "/") is None:
                rt.notes.append(
                    f"{where} to {step.dest}: in a read-only system directory of the "
                    "sandbox's root filesystem; not applied"
                )
                continue
            problem = await copy_step(rt, sandbox, context, step, deadline)
            if problem:
                rt.notes.append(f"{where}: {problem}")
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            raise BuildTimeoutError(
                f"environment setup ran past build_timeout_sec={rt.task.environment.build_timeout_s}"
            )
        cwd = step.workdir if workspace_root(rt, step.workdir) else rt.workdir
        if cwd != rt.workdir:
            await sandbox.exec(["mkdir", "-p", cwd], timeout=30)
        result = await sandbox.exec(["/bin/sh", "-c", step.command], timeout=left, cwd=cwd)
        if result.timed_out:
            raise BuildTimeoutError(
                f"{where} {step.command!r} ran past build_timeout_sec="
                f"{rt.task.environment.build_timeout_s}"
            )
        if not result.ok:
            rt.notes.append(
                f"{where} {step.command}: failed in the sandbox (exit {result.exit_code}): "
                f"{result.output.strip()[-300:]}"
            )


async def copy_step(
    rt: HarborRuntime, sandbox: Sandbox, context: Path, step: SetupStep, deadline: float
) -> str | None:
    """Apply one COPY: a problem with its sources is returned (a note); a failed copy
    raises `TaskEnvironmentError`."""
    dest = step.dest
    found_root = workspace_root(rt, dest.rstrip("/") or "/")
    assert found_root is not None  # checked by the caller
    inside_root, host_root = found_root
    rel = PurePosixPath(os.path.normpath(dest.rstrip("/") or "/")).relative_to(inside_root)
    target = host_root / rel
    matched, problem = match_sources(context, step.sources)
    if problem:
        return problem
    # lstat only: a RUN step (the sandbox's user) may have left a link at the target.
    is_dir = target.is_dir() and not target.is_symlink()
    as_dir = dest.endswith("/") or len(matched) > 1 or is_dir
    jobs = []
    for src in matched:
        if src.is_dir():
            jobs.append(CopyJob(src.resolve(), str(rel), tree=True))
        else:
            final = rel / src.name if as_dir else rel
            jobs.append(CopyJob(src.resolve(), str(final), tree=False))
    where = f"Dockerfile:{step.line} COPY"
    await copy_into_workspace(rt, sandbox, jobs, host_root, deadline, where)
    return None


async def copy_into_workspace(
    rt: HarborRuntime,
    sandbox: Sandbox,
    jobs: Sequence[CopyJob],
    dest_root: Path,
    deadline: float,
    where: str,
) -> None:
    """Copy host files into the workspace from a child process charged to `sandbox`'s
    cgroups (the workspace is a tmpfs: its pages are memory), keeping sparse files
    sparse and following no link in the workspace (`host.charged_copy`)."""
    spec = sandbox.spec
    bound = sandbox if isinstance(sandbox, BoundBwrap) else None
    procs = bound.charge_files() if bound is not None else []
    ooms = bound.oom_kill_count() if bound is not None else 0
    try:
        skipped = await charged_copy(
            jobs,
            dest_root,
            cgroup_procs=procs,
            owner=SANDBOX_UID if os.geteuid() == 0 else None,
            budget_bytes=rt.disk_bytes or DEFAULT_DISK_BYTES,
            timeout_s=max(1.0, deadline - time.monotonic()),
            memory_bytes=spec.memory_bytes if procs else None,
        )
    except TimeoutError:
        raise BuildTimeoutError(
            f"{where} ran past build_timeout_sec={rt.task.environment.build_timeout_s}"
        ) from None
    except (CopyError, OSError) as e:
        if bound is not None and bound.oom_kill_count() > ooms:
            cap = (spec.memory_bytes or 0) >> 20
            raise TaskEnvironmentError(
                f"{where}: out of memory: the copy is charged to the sandbox's memory cap "
                f"({cap} MiB; the workspace is a tmpfs, its pages are memory)"
            ) from None
        raise TaskEnvironmentError(f"{where}: {e}") from None
    rt.notes.extend(f"{where}: {line}" for line in skipped)
    give(dest_root)
