"""Agent rollouts on SWE-bench instances, then the evaluation report (`skyrl swebench run`).

Each instance is one episode of the `swe` env. Its grading phase evaluates the agent's diff
with the harness and leaves `OUT/logs/<instance_id>/` (patch, eval script, test output,
`result.json`, `prediction.json`). Afterwards `OUT/predictions.jsonl` collects the patches and
`OUT/report.json` the official summary; `trajectories.jsonl` and `results.json` are the
agent loop's usual outputs. An episode that ends without `submit` counts as an empty patch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def collect(instances: Sequence[SWEInstance], out_dir: str | Path, model_name: str) -> RunResult:
    """Build `predictions.jsonl` and `report.json` from the episodes' logs in `out_dir`."""
    out = Path(out_dir)
    predictions: dict[str, Prediction] = {}
    results: list[InstanceResult] = []
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
        predictions[instance.instance_id] = prediction
        results.append(result)
    with (out / "predictions.jsonl").open("w", encoding="utf-8") as f:
        for prediction in predictions.values():
            f.write(json.dumps(prediction.model_dump()) + "\n")
    report = make_report(instances, predictions, results)
    return RunResult(report, results, write_json(out / "report.json", report))


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
) -> RunResult:
    """Play one `swe` episode per instance with `policy`, then write the report."""
    import skyrl_gym
    from skyrl_sdk.agents.evaluate import plan, run_plan

    out = Path(out_dir)
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
    await run_plan(
        the_plan,
        lambda: skyrl_gym.make("swe", **kwargs),
        policy,
        env_id="swe",
        concurrency=concurrency,
        limits=limits,
        sampling=sampling,
        on_done=on_done,
    )
    return collect(instances, out, getattr(policy, "name", "agent"))
