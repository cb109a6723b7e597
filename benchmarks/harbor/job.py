"""Jobs over Harbor task folders.

A job = every task under a path, each `config.trials` times (Harbor's `-k`), `n` trials at a
time (`trial.run_trial`: one task played by one agent, graded, recorded in
`<trial>/result.json`); it writes `<out>/job.json` (`mean_reward`, `trials` with each one's
`trial` index, and `statistics`: success = reward >= 1 with its interval, pass@k, pass^k and
flip rate, `skyrl_sdk.stats`), `<out>/trajectories.jsonl` (llm and command agents; each
trajectory's `trial` set) and a summary table. No trial's failure stops a job. What a job runs and records is in `records`
(re-exported here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from skyrl_gym.envs.harbor.task import find_task_dirs
from skyrl_sdk.agents.trials import trial_episode_id, trial_seed
from skyrl_sdk.benchmarks.harbor.agents import AgentKind
from skyrl_sdk.benchmarks.harbor.records import (
    JOB_FILE,
    RESULT_FILE,
    TRAJECTORIES,
    JobConfig,
    JobResult,
    Stage,
    StageOutcome,
    StageStatus,
    StepResult,
    TrialError,
    TrialResult,
)
from skyrl_sdk.benchmarks.harbor.trial import _write_new, run_trial


async def run_job(
    config: JobConfig,
    *,
    policy: Any = None,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> JobResult:
    """Run every task under `config.path`; write job.json and return the result.

    `policy` (an `agents.Policy`) overrides `config.policy` for the llm agent.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    task_dirs = find_task_dirs(config.path)
    if config.agent in (AgentKind.LLM, AgentKind.COMMAND) and policy is None:
        from skyrl_sdk.agents.policy_spec import load_policy

        spec = config.policy or ""
        tokenizer = (
            "tiny" if config.agent is AgentKind.COMMAND and spec.startswith("scripted:") else None
        )
        policy = load_policy(spec, tokenizer=tokenizer).policy
    runner = None
    if config.agent is AgentKind.COMMAND:
        from skyrl_sdk.agents.command_agent import CommandAgentRunner

        if policy.renderer is None:
            raise ValueError(
                "the command agent serves the policy with exact token ids: it needs a tokenizer"
            )
        runner = CommandAgentRunner(
            config.command, policy, capture_dir=out / "capture", log_dir=out / "agent_logs"
        )
    writer = None
    if config.agent in (AgentKind.LLM, AgentKind.COMMAND):
        from skyrl_sdk.agents.trajectory import TrajectoryWriter

        writer = TrajectoryWriter(out / TRAJECTORIES)
    limit = asyncio.Semaphore(config.concurrency)
    t0 = time.perf_counter()

    async def one(task_dir: Path, trial: int) -> TrialResult:
        def record(trajectory: Any) -> None:
            if writer is not None:
                # A multi-step task's episodes are `task/step`: keep that, mark the trial.
                episode_id = trial_episode_id(trajectory.episode_id, trial)
                writer.write(dataclasses.replace(trajectory, trial=trial, episode_id=episode_id))

        async with limit:
            result = await run_trial(
                task_dir,
                dataclasses.replace(config, seed=trial_seed(config.seed, trial, config.trials)),
                out,
                policy=runner or policy,
                on_trajectory=record if writer else None,
            )
        if trial:  # its result.json says which trial it was, like job.json
            result = dataclasses.replace(result, trial=trial)
            _write_result(out / result.trial_name, result)
        if on_trial is not None:
            on_trial(result)
        return result

    # Task order, each task's trials together (the semaphore starts them in this order).
    runs = [(d, k) for d in task_dirs for k in range(config.trials)]
    try:
        results: Sequence[TrialResult] = await asyncio.gather(*(one(d, k) for d, k in runs))
    finally:
        if writer is not None:
            writer.close()
        if runner is not None:
            runner.close()
    job = JobResult(
        agent=config.agent.value,
        backend=config.backend.value,
        path=str(Path(config.path).resolve()),
        trials=tuple(results),
        duration_s=time.perf_counter() - t0,
    )
    (out / JOB_FILE).write_text(json.dumps(job.to_json(), indent=2))
    return job


def _write_result(trial_dir: Path, result: TrialResult) -> None:
    """Rewrite `<trial>/result.json` as a new file (the trial folder holds links the
    sandboxed agent chose: never write through one)."""
    path = trial_dir / RESULT_FILE
    if not path.is_file():
        return
    # The trial's own writer: an unpredictable temporary name, so no link can be waiting there.
    _write_new(path, json.dumps(result.to_json(), indent=2))


def _stage_cell(outcome: StageOutcome | None) -> str:
    if outcome is None or outcome.status is StageStatus.SKIPPED:
        return "-"
    mark = "" if outcome.status is StageStatus.OK else "!"
    return f"{outcome.duration_s:.1f}{mark}"


def summary_table(job: JobResult) -> Any:
    """A rich table: one row per trial, then the mean reward and errors by kind."""
    from rich.table import Table

    table = Table(title=f"harbor: {job.agent} on {Path(job.path).name} ({job.backend})")
    table.add_column("task")
    table.add_column("trial", justify="right")
    table.add_column("reward", justify="right")
    table.add_column("rewards")
    table.add_column("error")
    # Seconds per stage, in order; "-" where it did not run, "!" where it failed.
    table.add_column("/".join(name.value for name in Stage) + " s", justify="right")
    table.add_column("failed stage")
    table.add_column("s", justify="right")
    for t in job.trials:
        extra = {k: v for k, v in (t.rewards or {}).items() if k != "reward"}
        failed = t.failed_stage
        # The kind is in the error column: the stage and the start of its reason here.
        why = (t.stages[failed].error or "").partition(": ")[2] if failed is not None else ""
        table.add_row(
            t.task,
            str(t.trial),
            "-" if t.reward is None else f"{t.reward:g}",
            ", ".join(f"{k}={v:g}" for k, v in extra.items()),
            t.error.value if t.error else "",
            "/".join(_stage_cell(t.stages.get(name)) for name in Stage),
            f"{failed.value}: {why[:80]}" if failed is not None else "",
            f"{t.duration_s:.1f}",
        )
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(job.errors_by_kind.items())) or "none"
    # Where the time went, over all trials (a slow build shows in build, not agent).
    totals = ", ".join(f"{k.value} {v:.1f}s" for k, v in job.stage_seconds.items())
    table.caption = (
        f"mean reward {job.mean_reward:.3f} over {len(job.trials)} trial(s); errors: {errors}"
        f"\ntime by stage: {totals}"
    )
    return table


__all__ = [
    "JOB_FILE",
    "RESULT_FILE",
    "TRAJECTORIES",
    "JobConfig",
    "JobResult",
    "Stage",
    "StageOutcome",
    "StageStatus",
    "StepResult",
    "TrialError",
    "TrialResult",
    "run_job",
    "run_trial",
    "summary_table",
]
