"""Behaviour of the built-in envs: math, math-answer, sql-basic."""

import hashlib
import json

import pytest

import skyrl_gym
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_gym.envs.math.single import MathAnswerEnv
from skyrl_gym.envs.sql_basic.env import bundled_database
from skyrl_gym.envs.sql_basic.env import bundled_tasks as sql_tasks
from skyrl_gym.step_info import StepInfo
from skyrl_sdk.tools.calculator import evaluate
from skyrl_sdk.tools.calls import ParseError, ParseErrorKind


def test_bundled_math_answers_follow_from_their_expressions():
    tasks = bundled_tasks()
    assert len(tasks) >= 50
    for task in tasks:
        assert str(evaluate(task["expression"].replace("//", "/"))) in (
            task["answer"],
            task["answer"] + ".0",
        )


def test_math_episode_with_calculator_then_answer():
    env = skyrl_gym.make("math")
    messages, info = env.reset(seed=3)
    task = env.unwrapped.task
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "<calculator>" in messages[0]["content"]
    obs, reward, terminated, truncated, info = env.step(
        f"Compute. <calculator>{task['expression']}</calculator>"
    )
    assert obs == [{"role": "user", "content": f"<observation>\n{task['answer']}\n</observation>"}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool_calls"][0]["name"] == "calculator"
    obs, reward, terminated, truncated, info = env.step(f"<answer>{task['answer']}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["episode"]["correct"] is True


@pytest.mark.parametrize(
    ("given", "reward"),
    [("1,234", 1.0), ("$1234", 1.0), ("1234.0", 1.0), ("1235", 0.0), ("many", 0.0)],
)
def test_math_answer_comparison(given, reward):
    env = skyrl_gym.make("math")
    env.reset(options={"task": {"task_id": "t", "question": "?", "answer": "1234"}})
    assert env.step(f"<answer>{given}</answer>")[1] == reward


def test_math_hermes_format_and_errors_as_observations():
    env = skyrl_gym.make("math", tool_format="hermes")
    messages, _ = env.reset(seed=0)
    assert "<tools>" in messages[0]["content"]
    call = json.dumps({"name": "calculator", "arguments": {"expression": "6 * 7"}})
    obs, *_ = env.step(f"<tool_call>{call}</tool_call>")
    assert obs == [{"role": "tool", "name": "calculator", "content": "42"}]
    bad = json.dumps({"name": "calculator", "arguments": {"expr": "1"}})
    obs, reward, terminated, _, info = env.step(f"<tool_call>{bad}</tool_call>")
    assert info["parse_error"]["kind"] == "bad_arguments" and not terminated and reward == 0.0
    assert "unknown argument(s) expr" in obs[0]["content"]
    obs, *_, info = env.step("<tool_call>{broken</tool_call>")
    assert info["parse_error"]["kind"] == "invalid_json"


def test_math_calculator_errors_reach_the_model():
    env = skyrl_gym.make("math")
    env.reset(seed=0)
    obs, *_ = env.step("<calculator>import os</calculator>")
    assert "Error: CalculatorError" in obs[0]["content"]


def test_math_truncates_at_its_turn_limit():
    env = skyrl_gym.make("math", max_turns=2)
    env.reset(seed=0)
    env.step("<calculator>1+1</calculator>")
    *_, terminated, truncated, info = env.step("<calculator>1+1</calculator>")
    assert (terminated, truncated) == (False, True)


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        ("22*11=242, minus 27.\n#### 215", 1.0),
        ("#### 214", 0.0),
        ("#### 1\nso #### 215", 1.0),
        ("215", 0.0),
    ],
)
def test_math_answer_is_single_turn(reply, reward):
    env = skyrl_gym.make("math-answer")
    env.reset(options={"task": {"task_id": "t", "question": "?", "answer": "215"}})
    _, r, terminated, truncated, info = env.step(reply)
    assert (r, terminated, truncated) == (reward, True, False)
    assert (info["parse_error"] is None) == ("####" in reply)


@pytest.mark.parametrize(
    ("reply", "answer", "correct"),
    [
        ("22*11=242, minus 27.\n#### 215", "215", True),
        ("#### 2,14", "2,14", False),
        ("215", None, False),
    ],
)
def test_math_answer_info_is_the_step_protocol_s(reply, answer, correct):
    # math-answer writes its info dict directly (its hot path): it must be exactly what
    # StepInfo would write, and read back as the same StepInfo.
    env = skyrl_gym.make("math-answer")
    env.reset(options={"task": {"task_id": "t", "question": "?", "answer": "215"}})
    *_, info = env.step(reply)
    error = None if answer else ParseError(ParseErrorKind.NO_ACTION, "no '#### <number>' line")
    expected = StepInfo(parse_error=error, correct=correct, episode={"answer": answer}).write()
    episode = info["episode"]
    assert {k: v for k, v in info.items() if k != "episode"} == {
        k: v for k, v in expected.items() if k != "episode"
    }
    assert {k: episode[k] for k in expected["episode"]} == expected["episode"]
    assert episode["turns"] == 1 and episode["terminated"] is True  # EpisodeGuard's summary
    read = StepInfo.read(info)
    assert read == StepInfo(parse_error=error, correct=correct)
    bare = MathAnswerEnv()  # without the guard: the env's own dict only
    bare.reset(options={"task": {"task_id": "t", "question": "?", "answer": "215"}})
    assert bare.step(reply)[4] == expected


def test_sql_basic_gold_sql_answers_every_question():
    env = skyrl_gym.make("sql-basic")
    for task in sql_tasks():
        env.reset(options={"task": task})
        obs, *_ = env.step(f"<sql>{task['sql']}</sql>")
        value = obs[0]["content"].split("\n")[2]  # "<observation>", header, first row
        *_, info = env.step(f"<answer>{value}</answer>")
        assert info["episode"]["correct"], (task["task_id"], value)
    env.close()


def test_sql_basic_refuses_writes_and_the_database_is_unchanged():
    path = bundled_database()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    env = skyrl_gym.make("sql-basic")
    env.reset(seed=0)
    for attack in (
        "DELETE FROM orders",
        "DROP TABLE customers",
        "UPDATE products SET price = 0",
        "SELECT 1; DELETE FROM orders",
    ):
        obs, reward, terminated, _, _ = env.step(f"<sql>{attack}</sql>")
        assert obs[0]["content"].startswith("<observation>\nError: SQLRefused")
        assert not terminated
    env.close()
    env.close()  # idempotent
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_sql_basic_bad_sql_is_an_observation():
    env = skyrl_gym.make("sql-basic")
    env.reset(seed=0)
    obs, *_ = env.step("<sql>SELEC nonsense</sql>")
    assert "syntax error" in obs[0]["content"]
    env.close()
