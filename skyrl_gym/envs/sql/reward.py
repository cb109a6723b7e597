"""The SkyRL-SQL reward: -1 for a format violation, else 1 if the solution's rows match gold's.

The reward is computed once, when the episode ends, over the episode's transcript (every
assistant reply and every observation, concatenated; the prompt is not part of it):

- format: exactly one `<solution>` and one `</solution>`; no `<think>`, `<sql>` or
  `<observation>` tag (opening or closing) inside the solution; at least one
  `<think>...</think>`; every `</observation>` followed, after whitespace, by `<think>`.
  Anything else is a violation: reward -1 (so is running out of turns without a solution);
- execution: the solution and the gold query each run with a 30 s limit; reward 1 when both
  succeed and `frozenset(pred rows) == frozenset(gold rows)`, else 0.
"""

from __future__ import annotations

import enum
import re
from collections.abc import MutableMapping
from dataclasses import dataclass

from skyrl_gym.envs.sql.metrics import MatchResult, MatchStatus, Metric, execution_match
from skyrl_sdk.tools.sqldb import QueryOutcome, ReadOnlyDatabase

__all__ = ["RewardOutcome", "SQLReward", "check_format", "skyrl_reward"]

_SOLUTION = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FORBIDDEN_IN_SOLUTION = (
    "<think>",
    "</think>",
    "<sql>",
    "</sql>",
    "<observation>",
    "</observation>",
)


class RewardOutcome(enum.Enum):
    """Why an episode got its reward."""

    CORRECT = "correct"
    """Well-formed, and the solution's rows match the gold rows (reward 1)."""
    WRONG = "wrong"
    """Well-formed, but the solution's rows differ or it failed to run (reward 0)."""
    FORMAT_VIOLATION = "format_violation"
    """The transcript breaks the format, or no solution was given (reward -1)."""


REWARD_VALUES: dict[RewardOutcome, float] = {
    RewardOutcome.CORRECT: 1.0,
    RewardOutcome.WRONG: 0.0,
    RewardOutcome.FORMAT_VIOLATION: -1.0,
}


@dataclass(frozen=True)
class SQLReward:
    """The end-of-episode reward and how it came about."""

    outcome: RewardOutcome
    """Correct, wrong or format violation."""
    solution: str | None
    """The SQL inside `<solution>` (None when the format check failed)."""
    problem: str | None = None
    """The format rule that was broken, or why the solution scored 0."""
    match: MatchResult | None = None
    """The execution comparison, when one ran."""

    @property
    def value(self) -> float:
        """The reward: 1.0, 0.0 or -1.0."""
        return REWARD_VALUES[self.outcome]


def check_format(transcript: str) -> tuple[str | None, str | None]:
    """(solution SQL, None) when the transcript is well-formed, else (None, the broken rule)."""
    if transcript.count("<solution>") != 1 or transcript.count("</solution>") != 1:
        return None, "there must be exactly one <solution>...</solution>"
    found = _SOLUTION.search(transcript)
    if found is None:
        return None, "<solution> must come before </solution>"
    solution = found.group(1)
    for tag in _FORBIDDEN_IN_SOLUTION:
        if tag in solution:
            return None, f"the solution must not contain {tag}"
    if _THINK.search(transcript) is None:
        return None, "there must be at least one <think>...</think>"
    position = transcript.find("</observation>")
    while position >= 0:
        after = position + len("</observation>")
        if not transcript[after:].lstrip().startswith("<think>"):
            return None, "every observation must be followed by <think>"
        position = transcript.find("</observation>", after)
    return solution.strip(), None


def skyrl_reward(
    transcript: str,
    gold_sql: str,
    database: ReadOnlyDatabase,
    *,
    timeout_s: float = 30.0,
    gold_cache: MutableMapping[tuple[str, str], QueryOutcome] | None = None,
) -> SQLReward:
    """The SkyRL-SQL reward of a finished episode's transcript."""
    solution, problem = check_format(transcript)
    if solution is None:
        return SQLReward(RewardOutcome.FORMAT_VIOLATION, None, problem)
    try:
        match = execution_match(
            Metric.SKYRL, solution, gold_sql, [database], timeout_s=timeout_s, gold_cache=gold_cache
        )
    except Exception as e:  # any unexpected failure scores 0, as in SkyRL
        return SQLReward(RewardOutcome.WRONG, solution, f"{type(e).__name__}: {e}")
    if match.correct:
        return SQLReward(RewardOutcome.CORRECT, solution, None, match)
    reason = match.error or "the result differs from the gold result"
    if match.status is MatchStatus.WRONG:
        reason = "the result differs from the gold result"
    return SQLReward(RewardOutcome.WRONG, solution, reason, match)
