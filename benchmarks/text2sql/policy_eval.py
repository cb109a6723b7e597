"""`--policy` mode: play every question with the multi-turn `sql` env and score the solutions.

Each question is one episode of `SQLEnv` driven by the agent loop (`agents.rollout`); the SQL
in the episode's last `<solution>` is then scored with the chosen metric exactly like a
predictions file. Trajectories go to `OUT/trajectories.jsonl` as they finish.

With `trials=K` every question is played K times (`agents.trials`: trial k samples with a
seed derived from `seed` and k, its trajectory carries `trial = k`). The report's items and
accuracy are trial 0's; its statistics (`skyrl_sdk.stats`: `trials`, `per_task`, `mean`,
`ci95`, `pass_at_k`, `pass_hat_k`, `flip_rate`; success = a correct answer) cover every
trial, and `per_trial` lists each trial's accuracy and correct task ids.

Policy specs: `oracle` (answers every question with its gold SQL in one turn: checks the
pipeline, scores 100%), and everything `agents.policy_spec.load_policy` understands
(`http(s)://...` OpenAI-compatible servers, `scripted:FILE`, `tiny`, `local:DIR`).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from skyrl_gym.envs.sql.metrics import Metric
from skyrl_gym.tasks import TaskRow
from skyrl_sdk.benchmarks.text2sql.evaluate import EvalReport, score_predictions
from skyrl_sdk.tools.sql_limits import SQLLimits

__all__ = ["PolicyUnavailable", "evaluate_policy", "make_policy", "solution_of"]

_SOLUTION = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)


class PolicyUnavailable(RuntimeError):
    """The policy spec cannot be turned into a policy in this installation."""


def make_policy(spec: str, rows: Sequence[TaskRow]) -> Any:
    """A `agents.Policy` for `spec` (see the module docstring)."""
    try:
        from skyrl_sdk.agents.scripted import ScriptedPolicy
    except ImportError as e:  # pragma: no cover - agents is part of this distribution
        raise PolicyUnavailable(f"--policy needs the agents package ({e})") from e
    if spec == "oracle":
        gold = {str(r["task_id"]): str(r["gold_sql"]) for r in rows}
        script = {
            task_id: [f"<think>I know the answer.</think>\n<solution>{sql}</solution>"]
            for task_id, sql in gold.items()
        }
        return ScriptedPolicy(script, name="oracle")
    try:
        from skyrl_sdk.agents.policy_spec import load_policy
    except ImportError as e:
        raise PolicyUnavailable(
            f"policy spec {spec!r} is not available yet: only 'oracle' works without the agents "
            f"package's policy loader ({e})"
        ) from e
    try:
        return load_policy(spec).policy
    except (OSError, ValueError) as e:  # PolicySpecError is a ValueError
        raise PolicyUnavailable(f"cannot build policy {spec!r}: {e}") from e


def solution_of(actions: Sequence[str]) -> str | None:
    """The SQL of the last `<solution>...</solution>` in an episode's actions."""
    for action in reversed(actions):
        found = _SOLUTION.findall(action)
        if found:
            return found[-1].strip()
    return None


def evaluate_policy(
    rows: Sequence[TaskRow],
    spec: str,
    *,
    db_root: str | Path | None,
    metric: Metric | str = Metric.SPIDER,
    timeout_s: float | None = None,
    max_turns: int = 6,
    max_tokens: int = 3000,
    concurrency: int = 8,
    out_dir: str | Path | None = None,
    extra: dict[str, Any] | None = None,
    limits: SQLLimits | None = None,
    on_done: Callable[[Any], None] | None = None,
    trials: int = 1,
    seed: int | None = None,
) -> EvalReport:
    """Run one episode per row with `spec`'s policy; score each final solution. Every query
    (exploration and scoring) runs under `limits` (default `DEFAULT_SQL_LIMITS`); the policy
    generates at most `max_tokens` tokens per turn. `on_done` is called with each trajectory
    as its episode ends (the CLI's progress bar); `trials` and `seed`: see the module
    docstring."""
    from skyrl_gym.envs.sql.env import SQLEnv
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.rollout import RolloutLimits, run_episodes
    from skyrl_sdk.agents.trajectory import TrajectoryWriter
    from skyrl_sdk.agents.trials import trial_agent, trial_episodes

    policy = make_policy(spec, rows)
    writer = TrajectoryWriter(Path(out_dir) / "trajectories.jsonl") if out_dir else None
    rollout_limits = RolloutLimits(max_turns=max_turns, max_tokens=max_tokens)

    def make_env() -> SQLEnv:
        return SQLEnv(tasks=list(rows), db_root=db_root, max_turns=max_turns, limits=limits)

    episodes, trial_of = trial_episodes([dict(r) for r in rows], trials)
    sampling = SamplingParams(seed=seed) if seed is not None else None
    agent = trial_agent(trial_of, trials, policy=policy, limits=rollout_limits, sampling=sampling)

    async def run() -> list[Any]:
        try:
            return await run_episodes(
                make_env, agent, episodes, concurrency=concurrency, env_id="sql",
                writer=writer, on_done=on_done,
            )  # fmt: skip
        finally:
            await policy.aclose()

    try:
        trajectories = asyncio.run(run())
    finally:
        if writer is not None:
            writer.close()
    by_task = {(t.task_id, t.trial): t for t in trajectories}
    rewards = [t.reward for t in trajectories]
    stops = dict(Counter(t.stop_reason.value for t in trajectories))
    details = {
        **(extra or {}),
        "policy": spec,
        "policy_name": getattr(policy, "name", spec),
        "max_turns": max_turns,
        "max_tokens": max_tokens,
        "mean_env_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "stop_reasons": stops,
    }

    def score(k: int, extra: dict[str, Any]) -> EvalReport:
        preds = [_prediction(by_task.get((str(r["task_id"]), k))) for r in rows]
        return score_predictions(
            rows, preds, db_root=db_root, metric=metric, timeout_s=timeout_s,
            extra=extra, mode="policy", limits=limits,
        )  # fmt: skip

    reports = [score(0, details)] + [score(k, {}) for k in range(1, trials)]
    return replace(reports[0], extra={**reports[0].extra, **_trial_statistics(reports)})


def _prediction(trajectory: Any) -> str | None:
    """The SQL an episode's trajectory answered (None without a trajectory or a solution)."""
    return solution_of([turn.action for turn in trajectory.turns]) if trajectory else None


def _trial_statistics(reports: Sequence[EvalReport]) -> dict[str, Any]:
    """Every trial's report (trial k at index k) -> the statistics and `per_trial`."""
    from skyrl_sdk.stats import per_task, trial_stats

    tasks = per_task((i.task_id, bool(i.correct)) for r in reports for i in r.items)
    per_trial = {
        str(k): {
            "accuracy": r.accuracy,
            "correct_ids": [i.task_id for i in r.items if i.correct],
            "task_ids": [i.task_id for i in r.items],
        }
        for k, r in enumerate(reports)
    }
    return {**trial_stats(tasks).to_json(), "per_trial": per_trial}
