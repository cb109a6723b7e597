"""Check generated tasks in the runtime `skyrl harbor run` uses (`HarborRuntime`, bwrap).

Each probe plays one agent in the task's environment and grades it with the task's own
verifier in a fresh sandbox:

| probe | the agent | a good task gives |
|---|---|---|
| `oracle` | runs solution/solve.sh (mounted at /solution, as Harbor's oracle) | 1 |
| `nop` | does nothing | 0 |
| `ls` | runs `ls -la` only | 0 |
| `cross` | runs the solution of another seed of the same family | 0 |
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skyrl_gym.envs.harbor.runtime import AGENT_LOGS, SOLUTION, HarborRuntime
from skyrl_gym.envs.harbor.task import load_task
from skyrl_sdk.sandboxes import Backend


class Probe(enum.StrEnum):
    """An agent a generated task is checked with."""

    ORACLE = "oracle"
    """The task's own solution; must score 1."""
    NOP = "nop"
    """Does nothing; must score 0."""
    LS = "ls"
    """Only looks (`ls -la`); must score 0."""
    CROSS = "cross"
    """Another seed's solution of the same family; must score 0."""

    @property
    def expected(self) -> float:
        """The reward a sound task gives this probe."""
        return 1.0 if self is Probe.ORACLE else 0.0


@dataclass(frozen=True)
class ProbeResult:
    """One probe of one task."""

    task: str
    """Task folder name."""
    probe: Probe
    """Which agent played."""
    reward: float | None
    """The verifier's reward (None: no valid reward)."""
    message: str = ""
    """Verifier error or output tail, when the probe did not give the expected reward."""

    @property
    def ok(self) -> bool:
        """True when the reward is the one a sound task gives (no reward counts as 0)."""
        return (self.reward or 0.0) == self.probe.expected


async def run_probe(
    task_dir: Path,
    probe: Probe,
    *,
    script: str | None = None,
    backend: Backend = Backend.BWRAP,
    timeout_s: float = 60.0,
    strict: bool = True,
) -> ProbeResult:
    """Play `probe` on the task at `task_dir` and grade it. `script` is the shell text the
    `cross` probe runs (another seed's solve.sh). `strict` counts a reward only when test.sh
    exited 0 and nothing it started outlived its parent (`require_exit_zero`, as the `terminal-gen` env does);
    without it the reward is read as Harbor reads it (a killed test.sh still gives none)."""
    task = load_task(task_dir)
    runtime = HarborRuntime(task, backend=backend, require_exit_zero=strict)
    try:
        sandbox = await runtime.start(with_solution=probe is Probe.ORACLE)
        if probe is Probe.ORACLE:
            command = f"bash {SOLUTION}/solve.sh > {AGENT_LOGS}/oracle.txt 2>&1"
        elif probe is Probe.LS:
            command = "ls -la"
        elif probe is Probe.CROSS:
            if script is None:
                raise ValueError("the cross probe needs a script")
            command = script
        else:
            command = None
        if command is not None:
            await sandbox.exec([runtime.shell, "-c", command], timeout=timeout_s)
        result = await runtime.verify()
    finally:
        await runtime.close()
    reward = result.reward  # None unless test.sh exited 0 when `strict`
    message = ""
    if reward is None and result.error is not None:
        message = f"{result.error.value}: {result.message}"
    elif (reward or 0.0) != probe.expected:
        message = result.message or result.output_tail[-500:]
    return ProbeResult(task_dir.name, probe, reward, message)


async def check_tasks(
    task_dirs: Sequence[Path],
    probes: Sequence[Probe] = (Probe.ORACLE, Probe.NOP, Probe.LS, Probe.CROSS),
    *,
    concurrency: int = 4,
    backend: Backend = Backend.BWRAP,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> list[ProbeResult]:
    """Run `probes` on every task, `concurrency` at a time.

    `cross` pairs each task with the next task of the same family in `task_dirs` (cyclic);
    a family with a single task gets no cross probe.
    """
    limit = asyncio.Semaphore(concurrency)
    by_family: dict[str, list[Path]] = {}
    for d in task_dirs:
        by_family.setdefault(d.name.rsplit("-s", 1)[0], []).append(d)

    async def one(task_dir: Path, probe: Probe, script: str | None = None) -> ProbeResult:
        async with limit:
            try:
                result = await run_probe(task_dir, probe, script=script, backend=backend)
            except Exception as e:  # a task that cannot even start is a failed check
                result = ProbeResult(task_dir.name, probe, None, f"{type(e).__name__}: {e}")
                if probe is not Probe.ORACLE:
                    result = ProbeResult(task_dir.name, probe, -1.0, result.message)
        if on_result is not None:
            on_result(result)
        return result

    jobs = []
    for d in task_dirs:
        for probe in probes:
            if probe is Probe.CROSS:
                family = by_family[d.name.rsplit("-s", 1)[0]]
                if len(family) < 2:
                    continue
                other = family[(family.index(d) + 1) % len(family)]
                script = (other / "solution" / "solve.sh").read_text()
                jobs.append(one(d, probe, script))
            else:
                jobs.append(one(d, probe))
    return list(await asyncio.gather(*jobs))
