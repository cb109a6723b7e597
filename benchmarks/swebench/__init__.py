"""SWE-bench in sandboxes: load instances and predictions, evaluate, report.

    from skyrl_sdk.benchmarks.swebench import HarnessConfig, load_instances, load_predictions, run_evaluation
    instances = load_instances("instances.jsonl")
    run = asyncio.run(run_evaluation(instances, load_predictions("preds.jsonl"), "out",
                                     HarnessConfig(repos_dir="repos")))
    run.report["resolved_ids"]

Grading uses the `swebench` package (extra `swebench`), imported on first use. The `swe` env
(`skyrl_gym.envs.swe`) runs agents on the same instances; `skyrl swebench eval|run` are the CLI.
"""

from skyrl_gym.envs.swe.harness import (
    HarnessConfig,
    InstanceResult,
    Outcome,
    RunResult,
    build_eval_script,
    evaluate_instance,
    make_report,
    run_evaluation,
)
from skyrl_gym.envs.swe.instances import (
    InstanceError,
    Prediction,
    SWEInstance,
    load_instances,
    load_predictions,
)
from skyrl_gym.envs.swe.repos import RepoError, find_repo, materialize

__all__ = [
    "HarnessConfig",
    "InstanceError",
    "InstanceResult",
    "Outcome",
    "Prediction",
    "RepoError",
    "RunResult",
    "SWEInstance",
    "build_eval_script",
    "evaluate_instance",
    "find_repo",
    "load_instances",
    "load_predictions",
    "make_report",
    "materialize",
    "run_evaluation",
]
