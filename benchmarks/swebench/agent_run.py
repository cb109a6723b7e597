"""Agent rollouts on SWE-bench instances, then the evaluation report (`skyrl swebench run`).

Each instance is one episode of the `swe` env. Its grading phase evaluates the agent's diff
with the harness and leaves `OUT/logs/<instance_id>/` (patch, eval script, test output,
`result.json`, `prediction.json`). Afterwards `OUT/predictions.jsonl` collects the patches and
`OUT/report.json` the official summary; `trajectories.jsonl` and `results.json` are the
agent loop's usual outputs. An episode that ends without `submit` counts as an empty patch;
one that ran past the agent's limit (`--timeout`) first has the stop reason `agent_timeout`,
apart from an evaluation past `--eval-timeout` (`verifier_timeout`), both in report.json's
`stop_reasons`.

`trials=K` plays every instance K times: one trial alone writes the layout above, with the
run's statistics (`skyrl_sdk.stats`; success = resolved) added to report.json; several write
each trial's complete run in `OUT/trial-<k>/` (trial k samples with `trial_seed`; its
trajectories carry `trial = k`) and `OUT/report.json` holds the statistics over all of them
and, under `per_trial`, each trial's instance and resolved ids (what `skyrl compare` reads).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from skyrl_gym.envs.swe.harness import (
    InstanceResult,
    Outcome,
    RunResult,
    make_report,
    safe_name,
    write_json,
)
from skyrl_gym.envs.swe.instances import Prediction, SWEInstance
from skyrl_gym.stages import StageStop
from skyrl_sdk.stats import per_task, trial_stats


def collect(instances: Sequence[SWEInstance], out_dir: str | Path, model_name: str) -> RunResult:
    """Build `predictions.jsonl` and `report.json` from the episodes' logs in `out_dir`."""
    out = Path(out_dir)
    predictions: dict[str, Prediction] = {}
    results: list[InstanceResult] = []
    timed_out = _agent_timeouts(out)
    for instance in instances:
        log_dir = out / "logs" / safe_name(instance.instance_id)
        result_file, prediction_file = log_dir / "result.json", log_dir / "prediction.json"
        if result_file.is_file() and prediction_file.is_file():
            data = json.loads(prediction_file.read_text(encoding="utf-8"))
            prediction = Prediction.model_validate({**data, "model_name_or_path": model_name})
            result = InstanceResult.from_json(json.loads(result_file.read_text(encoding="utf-8")))
        else:
            prediction = Prediction(
                instance_id=instance.instance_id, model_name_or_path=model_name, model_patch=""
            )
            result = InstanceResult(
                instance.instance_id, Outcome.EMPTY_PATCH, model_name, error="never submitted"
            )
            if instance.instance_id in timed_out:  # the agent's limit ended it, not grading
                result = replace(
                    result,
                    error="agent_timeout: the episode ran past its timeout before submit",
                    stop_reason=StageStop.AGENT_TIMEOUT,
                )
        predictions[instance.instance_id] = prediction
        results.append(result)
    with (out / "predictions.jsonl").open("w", encoding="utf-8") as f:
        for prediction in predictions.values():
            f.write(json.dumps(prediction.model_dump()) + "\n")
    report = make_report(instances, predictions, results)
    return RunResult(report, results, write_json(out / "report.json", report))


def _agent_timeouts(out: Path) -> set[str]:
    """The instances whose episode in `out` (its trajectories.jsonl) ended at the agent's
    time limit."""
    from skyrl_sdk.agents.evaluate import TRAJECTORIES
    from skyrl_sdk.agents.trajectory import StopReason

    path = out / TRAJECTORIES
    if not path.is_file():
        return set()
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {r["task_id"] for r in rows if r.get("stop_reason") == StopReason.TIMEOUT.value}


async def run_agent(
    instances: Sequence[SWEInstance],
    policy: Any,
    out_dir: str | Path,
    *,
    repos: str | None = None,
    backend: str = "bwrap",
    concurrency: int = 2,
    limits: Any = None,
    sampling: Any = None,
    allow_clone: bool = False,
    eval_timeout_s: float = 1800.0,
    env_kwargs: dict[str, Any] | None = None,
    on_done: Any = None,
    trials: int = 1,
) -> RunResult:
    """Play one `swe` episode per instance with `policy` (`trials` times), then write the
    report (see the module docstring)."""
    options = {
        "repos": repos,
        "backend": backend,
        "concurrency": concurrency,
        "limits": limits,
        "allow_clone": allow_clone,
        "eval_timeout_s": eval_timeout_s,
        "env_kwargs": env_kwargs,
        "on_done": on_done,
    }
    if trials == 1:
        run = await _run_trial(instances, policy, Path(out_dir), sampling=sampling, **options)
        report = {**run.report, **_statistics([run.results])}
        return RunResult(report, run.results, write_json(run.report_path, report))
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.trials import trial_seed

    base = sampling or SamplingParams()
    runs = []
    for k in range(trials):
        seeded = replace(base, seed=trial_seed(base.seed, k, trials))
        trial_out = Path(out_dir) / f"trial-{k}"
        runs.append(
            await _run_trial(instances, policy, trial_out, sampling=seeded, trial=k, **options)
        )
    per_trial = {
        str(k): {
            "report": f"trial-{k}/report.json",
            "instance_ids": [i.instance_id for i in instances],
            "resolved_ids": run.report["resolved_ids"],
        }
        for k, run in enumerate(runs)
    }
    report = {**_statistics([run.results for run in runs]), "per_trial": per_trial}
    results = [r for run in runs for r in run.results]
    return RunResult(report, results, write_json(Path(out_dir) / "report.json", report))


def _statistics(trials: Sequence[Sequence[InstanceResult]]) -> dict[str, Any]:
    """The statistics over every trial's results (success: resolved)."""
    tasks = per_task(
        (r.instance_id, r.outcome is Outcome.RESOLVED) for results in trials for r in results
    )
    return trial_stats(tasks).to_json()


async def _run_trial(
    instances: Sequence[SWEInstance],
    policy: Any,
    out: Path,
    *,
    repos: str | None,
    backend: str,
    concurrency: int,
    limits: Any,
    sampling: Any,
    allow_clone: bool,
    eval_timeout_s: float,
    env_kwargs: dict[str, Any] | None,
    on_done: Any,
    trial: int | None = None,
) -> RunResult:
    """One episode per instance in `out`, then its report; `trial`: mark the trajectories."""
    import skyrl_gym
    from skyrl_sdk.agents.evaluate import plan, run_plan
    from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits
    from skyrl_sdk.agents.trials import TrialAgent

    rows = [i.to_row() for i in instances]
    the_plan = plan(rows, out)
    kwargs = {
        "tasks": rows,
        "repos": repos,
        "backend": backend,
        "allow_clone": allow_clone,
        "eval_timeout_s": eval_timeout_s,
        "results_dir": str(out / "logs"),
        **(env_kwargs or {}),
    }
    agent = None
    if trial is not None:
        loop = LoopAgent(policy, limits or RolloutLimits(), sampling)
        agent = TrialAgent({0: loop}, {episode_id: trial for episode_id, _ in the_plan.episodes})
    await run_plan(
        the_plan,
        lambda: skyrl_gym.make("swe", **kwargs),
        policy,
        env_id="swe",
        concurrency=concurrency,
        limits=limits,
        sampling=sampling,
        on_done=on_done,
        agent=agent,
    )
    return collect(instances, out, getattr(policy, "name", "agent"))
