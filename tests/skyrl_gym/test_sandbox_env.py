"""`EpisodeInfo`: each sandboxed env's `episode_info` writes exactly the keys its `TypedDict`
declares (every required one, no undeclared one), and the record is the JSON it always was.

No sandbox starts here: each test sets the graded state an episode leaves behind and reads
`episode_info()` as the env's `_step` does when the episode ends.
"""

import json
from typing import Any

import pytest

from skyrl_gym.envs.harbor.env import (
    HarborEnv,
    HarborEpisodeInfo,
    StepEnd,
    StepOutcome,
    StepOutcomeJSON,
)
from skyrl_gym.envs.harbor.verdict import VerifierError, VerifierResult
from skyrl_gym.envs.swe.env import SWEEnv, SWEEpisodeInfo
from skyrl_gym.envs.swe.harness import InstanceResult, Outcome
from skyrl_gym.envs.terminal.env import SINGLE_UID_NOTE, TerminalEnv, TerminalEpisodeInfo
from skyrl_gym.envs.terminal_gen.env import TerminalGenEnv, TerminalGenEpisodeInfo
from skyrl_gym.sandbox_env import EpisodeInfo
from skyrl_sdk.sandboxes import GradingIsolation


def assert_declared(record: dict[str, Any], typed: type) -> None:
    """`record` has every required key of the TypedDict `typed` and no key it leaves out."""
    keys = set(record)
    assert typed.__required_keys__ <= keys, sorted(typed.__required_keys__ - keys)
    undeclared = keys - typed.__required_keys__ - typed.__optional_keys__
    assert not undeclared, f"{typed.__name__} leaves out {sorted(undeclared)}"


def test_every_env_record_extends_episode_info():
    assert EpisodeInfo.__optional_keys__ == {"notes"} and not EpisodeInfo.__required_keys__
    for typed in (TerminalEpisodeInfo, HarborEpisodeInfo, SWEEpisodeInfo):
        assert "notes" in typed.__optional_keys__, typed.__name__
    assert HarborEpisodeInfo.__optional_keys__ <= TerminalGenEpisodeInfo.__optional_keys__


@pytest.mark.parametrize("isolation", list(GradingIsolation))
def test_terminal_record(isolation):
    env = TerminalEnv()
    try:
        assert env.episode_info() == {"check": None}
        env.last_check = {
            "exit_code": 1,
            "output": "FAIL",
            "timed_out": False,
            "isolation": isolation.value,
        }
        info = env.episode_info()
        assert_declared(info, TerminalEpisodeInfo)
        assert info["check"] is env.last_check
        single = isolation is GradingIsolation.SINGLE_UID
        assert info.get("notes") == ([SINGLE_UID_NOTE] if single else None)
        assert list(info) == (["check", "notes"] if single else ["check"])
    finally:
        env.close()


def _harbor_result() -> VerifierResult:
    return VerifierResult(
        {"reward": 0.5, "style": 1.0},
        None,
        "",
        duration_s=1.25,
        isolation=GradingIsolation.TWO_UID,
    )


def test_harbor_record():
    env = HarborEnv()
    try:
        assert env.episode_info() == {}  # not graded yet
        env.verifier_result = _harbor_result()
        info = env.episode_info()
        assert_declared(info, HarborEpisodeInfo)
        assert json.dumps(info) == json.dumps(
            {
                "rewards": {"reward": 0.5, "style": 1.0},
                "verifier_error": None,
                "verifier_message": "",
                "grading_isolation": "two_uid",
            }
        )
    finally:
        env.close()


class _MultiStepHarbor(HarborEnv):
    """A `HarborEnv` whose episode counts as multi-step without a runtime."""

    multi_step = True  # type: ignore[assignment]  # the property, pinned for the test


def test_harbor_multi_step_record_and_step_json():
    env = _MultiStepHarbor()
    try:
        failed = VerifierResult(
            None, VerifierError.REWARD_FILE_NOT_FOUND, "no reward", duration_s=2.0
        )
        outcome = StepOutcome("build", failed, 3.5, StepEnd.ANSWER, False, True)
        env.verifier_result, env.step_outcomes = failed, [outcome]
        step = outcome.to_json()
        assert_declared(step, StepOutcomeJSON)
        assert list(step) == list(StepOutcomeJSON.__annotations__)
        assert step["verifier_error"] == VerifierError.REWARD_FILE_NOT_FOUND.value
        info = env.episode_info()
        assert_declared(info, HarborEpisodeInfo)
        assert list(info)[-2:] == ["steps", "step_setup_error"]
        assert info["steps"] == [step] and info["step_setup_error"] is None
    finally:
        env.close()


def test_terminal_gen_record():
    env = TerminalGenEnv(families=["echo-word"], per_family=1)
    try:
        env.task = env.tasks[0]
        card = env.episode_info()  # not graded yet: the task's card alone
        assert_declared(card, TerminalGenEpisodeInfo)
        assert list(card) == ["family", "difficulty", "category"]
        assert card["family"] == "echo-word"
        env.verifier_result = _harbor_result()
        info = env.episode_info()
        assert_declared(info, TerminalGenEpisodeInfo)
        assert list(info) == [*HarborEnv.episode_info(env), *card]
    finally:
        env.close()


def test_swe_record():
    env = SWEEnv()
    try:
        info = env.episode_info()  # not graded yet
        assert_declared(info, SWEEpisodeInfo)
        assert info == {
            "outcome": None,
            "error": None,
            "model_patch": None,
            "stripped_test_files": [],
            "tests_status": {},
        }
        status = {"FAIL_TO_PASS": {"success": ["t::a"], "failure": []}}
        env.last_result = InstanceResult("x", Outcome.RESOLVED, report={"tests_status": status})
        env.last_patch, env.stripped = "diff", ["tests/test_x.py"]
        info = env.episode_info()
        assert_declared(info, SWEEpisodeInfo)
        assert json.dumps(info) == json.dumps(
            {
                "outcome": "resolved",
                "error": None,
                "model_patch": "diff",
                "stripped_test_files": ["tests/test_x.py"],
                "tests_status": status,
            }
        )
    finally:
        env.close()
