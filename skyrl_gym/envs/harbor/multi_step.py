"""Multi-step tasks: each step's agent phase in the same environment, one after another
(its view of the task, a fresh agent sandbox on the same working directory, its setup hook)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from skyrl_gym.envs.harbor.healthcheck import STEP_HEALTHCHECK, HealthcheckError, run_healthcheck
from skyrl_gym.envs.harbor.task import StepSetupError, TaskStep
from skyrl_gym.envs.harbor.trial_paths import (
    AGENT_LOGS,
    ARTIFACTS,
    SOLUTION,
    VERIFIER_LOGS,
    fresh_dir,
    give,
)
from skyrl_sdk.sandboxes import Backend, Sandbox, SandboxError

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime


async def begin_step(rt: HarborRuntime, step: TaskStep, *, with_solution: bool = False) -> Sandbox:
    """Run `step` of a multi-step task next, in this same environment: the agent's
    sandbox of the previous step (if any) is closed, `task` becomes the step's view (its
    instruction, timeouts, solution, and the task's tests/ with the step's layered over
    them), and a fresh agent sandbox opens on the same working directory (the first step
    builds the environment through `start`). The step's setup hook then runs in it
    (`run_step_setup`; `StepSetupError` when it fails). `verify()` then grades this step."""
    if rt.base_task is None:
        rt.base_task = rt.task
    base = rt.base_task
    tests = fresh_dir(rt._work / "step-tests" / step.name)
    # Task-level helpers first, then the step's files over them (the step's test.sh wins).
    for src in (base.path / "tests", step.tests_dir):
        if src is not None and src.is_dir():
            shutil.copytree(src, tests, dirs_exist_ok=True)
    rt.task = base.for_step(step, tests)
    rt.verifier_result = None
    if rt.sandbox is None and not rt._agent_phase_over:  # the first step
        sandbox = await rt.start(with_solution=with_solution)
        await rt.run_step_setup(step)
        return sandbox
    if not rt._agent_phase_over:  # a subclass may reopen its agent phase after this
        await rt.end_agent_phase()
    rt._agent_phase_over = False
    rt.solution_uploaded = False
    solution = rt.task.solution_dir if with_solution else None
    if rt.backend is Backend.BWRAP:
        binds = {
            AGENT_LOGS: rt.agent_logs_dir,
            VERIFIER_LOGS: fresh_dir(rt._work / "agent-phase-verifier"),
            ARTIFACTS: rt.artifacts_dir,
        }
        if solution is not None:  # the task folder's tree checks bound it (TREE_MAX_*)
            host = fresh_dir(rt._work / "solution")
            shutil.copytree(solution, host, dirs_exist_ok=True)
            give(host)
            binds[SOLUTION] = host
        sandbox = await rt._open(binds, rt._env)
    else:
        sandbox = await rt._open({}, rt._env)
        if solution is not None:
            try:
                await sandbox.upload(solution, rt._real(SOLUTION))
            except BaseException:
                await sandbox.close()
                raise
    rt.solution_uploaded = solution is not None
    rt.sandbox = sandbox
    await rt.run_step_setup(step)
    return sandbox


async def run_step_setup(rt: HarborRuntime, step: TaskStep) -> None:
    """Harbor's per-step setup hook, in the step's agent sandbox before its agent phase:
    steps/<name>/workdir/ is copied into the working directory (setup.sh included, as
    Harbor uploads it), then `bash <workdir>/setup.sh` runs there as the agent's user,
    within `[environment].build_timeout_sec`. The copy is made by the sandbox itself, so a
    link the agent left in the working directory leads nowhere outside it. Then the step's
    `[steps.healthcheck]` runs (`healthcheck`). Raises `StepSetupError` naming the step when
    the copy, setup.sh or the healthcheck fails."""
    await _copy_and_run_setup(rt, step)
    if step.healthcheck is None or rt.sandbox is None:
        return
    try:
        await run_healthcheck(
            rt.sandbox, step.healthcheck, shell=rt.shell, cwd=rt.workdir, where=STEP_HEALTHCHECK
        )
    except HealthcheckError as e:
        raise StepSetupError(step.name, str(e)) from None


async def _copy_and_run_setup(rt: HarborRuntime, step: TaskStep) -> None:
    """The step's workdir/ copied in and its setup.sh run (`run_step_setup`)."""
    source, sandbox = step.workdir_dir, rt.sandbox
    if source is None or sandbox is None:
        return
    try:
        await sandbox.upload(source, rt.workdir)
    except (SandboxError, OSError) as e:
        raise StepSetupError(
            step.name, f"workdir/ could not be copied into {rt.workdir}: {e}"
        ) from None
    if step.setup_script is None:
        return
    limit = rt.task.environment.build_timeout_s
    script = f"{rt.workdir.rstrip('/')}/setup.sh"
    try:
        result = await sandbox.exec([rt._shell, script], timeout=limit, cwd=rt.workdir)
    except SandboxError as e:
        raise StepSetupError(step.name, f"workdir/setup.sh could not run: {e}") from None
    if result.timed_out:
        raise StepSetupError(step.name, f"workdir/setup.sh ran past build_timeout_sec={limit:g}")
    if not result.ok:
        tail = " ".join(result.output.split())[-300:]
        raise StepSetupError(step.name, f"workdir/setup.sh exited with {result.exit_code}: {tail}")
