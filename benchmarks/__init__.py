"""Evaluation suites and performance benchmarks.

- Evaluation suites score an agent or a policy on tasks: `harbor` (`skyrl harbor run`),
  `swebench` (`skyrl swebench`), `text2sql` (`skyrl text2sql eval`).
- Performance benchmarks, `perf`, time our code against a baseline measured in the same run
  (`skyrl bench NAME [--json]`).
- `harness_venv` builds the agent harnesses' own virtualenvs that command agents run with.
"""

from skyrl_sdk.benchmarks.perf import BENCHMARKS

__all__ = ["BENCHMARKS"]
"""`BENCHMARKS` lives in `skyrl_sdk.benchmarks.perf`; this name is kept for existing imports."""
