"""Run Harbor task folders with an agent and grade them: `skyrl harbor run`.

from skyrl_sdk.benchmarks.harbor import JobConfig, run_job
job = asyncio.run(run_job(JobConfig(path="tasks/", agent="oracle", out="runs/h")))
"""

from skyrl_sdk.benchmarks.harbor.agents import AgentKind
from skyrl_sdk.benchmarks.harbor.job import (
    JobConfig,
    JobResult,
    TrialError,
    TrialResult,
    run_job,
    run_trial,
)

__all__ = [
    "AgentKind",
    "JobConfig",
    "JobResult",
    "TrialError",
    "TrialResult",
    "run_job",
    "run_trial",
]
