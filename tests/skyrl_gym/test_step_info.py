"""The typed step protocol: StepInfo reads what envs write, names bad keys, and check_env uses it."""

from __future__ import annotations

import dataclasses

import pytest

import skyrl_gym
from skyrl_gym.checker import run_checks
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_gym.step_info import InfoKey, StepInfo, StepInfoError, TruncatedBy
from skyrl_sdk.tools.calls import ParseError, ParseErrorKind, ToolCall

from . import user_envs as envs


def test_write_then_read_round_trips_and_info_stays_a_plain_dict():
    step = StepInfo(
        (ToolCall("sql", {"query": "SELECT 1"}, "c1"),),
        ParseError(ParseErrorKind.BAD_ARGUMENTS, "query must be a string"),
        TruncatedBy.MAX_TURNS,
        correct=False,
        episode={"answer": "7"},
    )
    info = step.write({"own_key": 3})
    assert info == {
        "own_key": 3,
        "tool_calls": [{"name": "sql", "arguments": {"query": "SELECT 1"}, "id": "c1"}],
        "parse_error": {"kind": "bad_arguments", "message": "query must be a string"},
        "truncated_by": "max_turns",
        "episode": {"answer": "7", "correct": False},
    }
    back = StepInfo.read(info)
    assert back == step and back.episode == {"answer": "7", "correct": False}
    assert StepInfo.read({}) == StepInfo()  # every key is optional
    assert InfoKey.TOOL_CALLS == "tool_calls"  # a str enum: usable as a dict key


def test_step_info_stays_a_frozen_dataclass_with_its_fields_and_defaults():
    # StepInfo's __init__ is written by hand (cheaper than the generated frozen one): it must
    # keep the dataclass's signature, defaults, equality, immutability and `replace`.
    call = ToolCall("sql", {"query": "SELECT 1"}, "c1")
    error = ParseError(ParseErrorKind.NO_ACTION, "none")
    positional = StepInfo((call,), error, TruncatedBy.MAX_TURNS, True, {"answer": "7"})
    keywords = StepInfo(
        tool_calls=(call,),
        parse_error=error,
        truncated_by=TruncatedBy.MAX_TURNS,
        correct=True,
        episode={"answer": "8"},  # compare=False: not part of equality
    )
    assert positional == keywords and positional != StepInfo((call,), error, correct=False)
    assert [f.name for f in dataclasses.fields(StepInfo)] == [
        "tool_calls",
        "parse_error",
        "truncated_by",
        "correct",
        "episode",
    ]
    empty = StepInfo()
    assert (empty.tool_calls, empty.parse_error, empty.truncated_by) == ((), None, None)
    assert (empty.correct, empty.episode) == (None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        empty.correct = True  # type: ignore[misc]
    assert dataclasses.replace(positional, correct=False).correct is False
    assert repr(empty) == (
        "StepInfo(tool_calls=(), parse_error=None, truncated_by=None, correct=None, episode=None)"
    )
    with pytest.raises(TypeError):
        StepInfo(colour="red")  # type: ignore[call-arg]


def test_write_merges_into_an_existing_episode_and_keeps_the_caller_s_metrics():
    metrics = {"answer": "7"}
    info = {"episode": {"turns": 2}}
    StepInfo(correct=True, episode=metrics).write(info)
    assert info == {
        "tool_calls": [],
        "parse_error": None,
        "episode": {"turns": 2, "answer": "7", "correct": True},
    }
    assert metrics == {"answer": "7"}  # the env's own dict is not written into
    assert StepInfo().write() == {"tool_calls": [], "parse_error": None}


@pytest.mark.parametrize(
    ("info", "key", "words"),
    [
        (
            {"parse_error": {"kind": "typo", "message": "m"}},
            "parse_error",
            "unknown \"kind\" 'typo'",
        ),
        ({"parse_error": {"kind": "no_action"}}, "parse_error", '"message" must be a string'),
        ({"parse_error": "oops"}, "parse_error", "must be an object, got str"),
        ({"tool_calls": {"name": "x"}}, "tool_calls", "must be a list of calls, got dict"),
        ({"tool_calls": [{"arguments": {}}]}, "tool_calls[0]", '"name" must be a non-empty'),
        ({"tool_calls": [{"name": "a", "arguments": [1]}]}, "tool_calls[0]", '"arguments" must'),
        ({"tool_calls": [{"name": "a", "id": 5}]}, "tool_calls[0]", '"id" must be a string'),
        ({"truncated_by": "boredom"}, "truncated_by", "unknown value 'boredom'; known: max_turns"),
        ({"episode": ["correct"]}, "episode", "must be an object of metrics, got list"),
        ({"episode": {"correct": "yes"}}, "episode.correct", "must be a bool, got str"),
        ({"episode": {"correct": 1}}, "episode.correct", "must be a bool, got int"),
    ],
)
def test_read_names_the_bad_key_and_value(info, key, words):
    with pytest.raises(StepInfoError) as caught:
        StepInfo.read(info)
    assert caught.value.key == key
    assert str(caught.value).startswith(f"info[{key!r}]: ") and words in str(caught.value)


def test_read_rejects_a_non_dict_info():
    with pytest.raises(StepInfoError, match="info must be a dict, got list"):
        StepInfo.read([])


@pytest.mark.parametrize(
    "raw",
    [
        {"name": "sql", "arguments": {"q": "1"}, "id": None},  # as ToolCall.to_json writes it
        {"name": "sql", "arguments": {"q": "1"}, "id": "c1"},
        {"name": "sql", "arguments": {"q": "1"}, "extra": 1},  # no id: None, extra ignored
        {"id": None, "arguments": {"q": "1"}, "name": "sql"},  # any key order
    ],
)
def test_calls_in_the_written_shape_read_as_from_json_reads_them(raw):
    (call,) = StepInfo.read({"tool_calls": [raw]}).tool_calls
    assert call == ToolCall.from_json(raw) and type(call) is ToolCall
    raw["arguments"]["q"] = "2"  # the read copied the arguments
    assert call.arguments == {"q": "1"}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"name": "", "arguments": {}, "id": None}, '"name" must be a non-empty'),
        ({"name": 3, "arguments": {}, "id": None}, '"name" must be a non-empty'),
        ({"name": "a", "arguments": [1], "id": None}, '"arguments" must'),
        ({"name": "a", "arguments": {}, "id": 5}, '"id" must be a string'),
    ],
)
def test_malformed_calls_of_the_written_size_still_name_their_field(raw, words):
    with pytest.raises(StepInfoError) as caught:
        StepInfo.read({"tool_calls": [{"name": "ok", "arguments": {}, "id": None}, raw]})
    assert caught.value.key == "tool_calls[1]" and words in str(caught.value)


def test_tool_env_and_episode_guard_write_the_protocol():
    env = skyrl_gym.make("math", max_turns=2)
    task = bundled_tasks()[0]
    env.reset(options={"task": task})
    *_, info = env.step(f"<calculator>{task['expression']}</calculator>")
    step = StepInfo.read(info)
    assert [c.name for c in step.tool_calls] == ["calculator"] and step.parse_error is None
    *_, truncated, info = env.step("no tool here")
    step = StepInfo.read(info)
    assert truncated and step.truncated_by is TruncatedBy.MAX_TURNS
    assert step.parse_error is not None and step.parse_error.kind is ParseErrorKind.NO_ACTION
    env.reset(options={"task": task})
    *_, info = env.step(f"<answer>{task['answer']}</answer>")
    step = StepInfo.read(info)
    assert step.correct is True and step.episode is not None and step.episode["turns"] == 1


class UnknownParseErrorKind(envs.CountdownEnv):
    """Reports a parse error of a kind the protocol does not know, on its second step."""

    def step(self, action):
        messages, reward, terminated, truncated, _ = super().step(action)
        info = {"parse_error": {"kind": "made_up", "message": "?"}} if self.left == 1 else {}
        return messages, reward, terminated, truncated, info


class StringCorrect(envs.CountdownEnv):
    def step(self, action):
        messages, reward, terminated, truncated, _ = super().step(action)
        return messages, reward, terminated, truncated, {"episode": {"correct": "true"}}


@pytest.mark.parametrize(
    ("bad_env", "words"),
    [
        (UnknownParseErrorKind, "step 2: info['parse_error']: unknown \"kind\" 'made_up'"),
        (StringCorrect, "step 1: info['episode.correct']: must be a bool, got str"),
    ],
)
def test_check_env_catches_malformed_info(bad_env, words):
    failures = {r.name: r.message for r in run_checks(bad_env) if not r.passed}
    assert set(failures) == {"check_step_info"}, failures
    assert words in failures["check_step_info"]
    with pytest.raises(skyrl_gym.EnvCheckError, match="check_step_info"):
        skyrl_gym.check_env(bad_env)


def test_episode_guard_leaves_a_malformed_episode_for_the_checker():
    failures = {r.name: r.message for r in run_checks(lambda: _guarded(BadEpisode)) if not r.passed}
    assert "info['episode']: must be an object of metrics, got str" in failures["check_step_info"]


class BadEpisode(envs.CountdownEnv):
    def step(self, action):
        messages, reward, terminated, truncated, _ = super().step(action)
        return messages, reward, terminated, truncated, {"episode": "solved"}


def _guarded(cls):
    return skyrl_gym.wrappers.EpisodeGuard(cls())
