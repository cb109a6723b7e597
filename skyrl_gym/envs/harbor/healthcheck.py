"""Harbor's healthcheck (`[environment.healthcheck]`, `[steps.healthcheck]`): a command run
in the environment after it starts (a step's: after its setup hook) and before the agent,
until it passes, with Docker HEALTHCHECK's semantics as Harbor implements them.

Each attempt runs `command` with the environment's shell in the working directory, limited
to `timeout_sec` (an attempt that runs past it failed). During `start_period_sec` from the
first attempt a failure does not count and the next attempt follows `start_interval_sec`
later; after it, `retries` consecutive failures fail the check (`HealthcheckError`), each
followed by `interval_sec`. Here the command runs as the agent's user (Harbor runs it as the
environment's default user, root in its containers)."""

from __future__ import annotations

import asyncio
import time

from skyrl_gym.envs.harbor.errors import TaskEnvironmentError
from skyrl_gym.envs.harbor.task import HealthcheckSettings
from skyrl_sdk.sandboxes import ExecResult, Sandbox, SandboxError

_OUTPUT_TAIL = 300
ENV_HEALTHCHECK = "[environment.healthcheck]"
"""How the task's own healthcheck is named in errors."""
STEP_HEALTHCHECK = "[steps.healthcheck]"
"""How a step's healthcheck is named in errors (the step's name comes with it)."""


class HealthcheckError(TaskEnvironmentError):
    """A healthcheck never passed: the environment is not ready, so the agent never starts
    (the trial fails its `start` stage; a step's stops the trial there)."""

    def __init__(self, where: str, check: HealthcheckSettings, attempts: int, last: str):
        super().__init__(
            f"{where} failed after {check.retries} consecutive retries "
            f"({attempts} attempts): {check.command!r}; last attempt: {last}"
        )
        self.where = where
        """Which healthcheck: `[environment.healthcheck]` or `[steps.healthcheck] of step X`."""
        self.attempts = attempts
        """How many times the command ran."""


def _describe(result: ExecResult | None, problem: str | None, timeout_s: float) -> str:
    """One line on a failed attempt: its exit status (or timeout) and the end of its output."""
    if problem is not None:
        return problem
    assert result is not None
    if result.timed_out:
        return f"ran past timeout_sec={timeout_s:g}"
    tail = " ".join(result.output.split())[-_OUTPUT_TAIL:]
    return f"exit {result.exit_code}" + (f": {tail}" if tail else "")


async def run_healthcheck(
    sandbox: Sandbox, check: HealthcheckSettings, *, shell: str, cwd: str, where: str
) -> int:
    """Run `check` in `sandbox` until it passes; returns the attempts it took. Raises
    `HealthcheckError` (naming `where`, the command and the last attempt's exit status and
    output) after `check.retries` consecutive failures past the start period."""
    start_period_end = time.monotonic() + check.start_period_s
    failures = attempts = 0
    while True:
        in_start_period = time.monotonic() < start_period_end
        attempts += 1
        result: ExecResult | None = None
        problem: str | None = None
        try:
            result = await sandbox.exec(
                [shell, "-c", check.command], timeout=check.timeout_s, cwd=cwd
            )
        except SandboxError as e:  # the command could not even start
            problem = f"could not run: {e}"
        if result is not None and result.ok:
            return attempts
        if in_start_period:
            await asyncio.sleep(check.start_interval_s)
            continue
        failures += 1
        if failures >= check.retries:
            raise HealthcheckError(
                where, check, attempts, _describe(result, problem, check.timeout_s)
            )
        await asyncio.sleep(check.interval_s)
