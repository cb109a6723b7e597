"""The `lookup-chat` env: look a price up with `lookup(item)`, then reply `ANSWER: price`."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.lookup_chat import EXAMPLE, ITEMS, REMINDER, LookupChatEnv, make_tasks
from skyrl_gym.step_info import StepInfo
from skyrl_sdk.tools.calls import ToolCall

TASK = {"task_id": "t", "item": "apple", "price": 42, "stock": 7}


def started(**kwargs) -> LookupChatEnv:
    env = LookupChatEnv(**kwargs)
    env.reset(options={"task": TASK})
    return env


def test_tasks_are_deterministic_and_never_the_examples_item():
    tasks = make_tasks()
    assert tasks == make_tasks() and tasks != make_tasks(seed=1)
    assert [t["item"] for t in tasks] == list(ITEMS)
    assert all(10 <= t["price"] <= 99 for t in tasks)
    assert "salt" not in ITEMS  # the worked example's item; its price must be read, not copied
    assert len({t["task_id"] for t in make_tasks(40)}) == 40


def test_opening_is_the_worked_example_then_the_question():
    env = LookupChatEnv()
    messages, info = env.reset(options={"task": TASK})
    assert messages[: len(EXAMPLE)] == EXAMPLE
    assert messages[-1] == {"role": "user", "content": "What is the price of apple?"}
    assert info == {"task_id": "t"}


def test_lookup_then_the_right_answer_succeeds():
    env = started()
    obs, reward, terminated, truncated, info = env.step("lookup(apple)")
    assert obs == [{"role": "user", "content": "lookup(apple): price 42, stock 7"}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert StepInfo.read(info).tool_calls == (ToolCall("lookup", {"item": "apple"}),)
    obs, reward, terminated, truncated, info = env.step("ANSWER: 42")
    assert (obs, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["episode"] == {"answer": 42, "correct": True, "looked_up": True}


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        ("Let me check: Lookup('Apple')", "The answer is ANSWER: $42."),
        ('lookup( "apple" ) = 26, stock 3', "answer:42"),
    ],
)
def test_formats_are_read_leniently(call, answer):
    env = started()
    assert env.step(call)[0][0]["content"].startswith("lookup(apple): price 42")
    assert env.step(answer)[1] == 1.0


def test_wrong_number_after_lookup_gets_the_tool_credit_only():
    env = started(tool_reward=0.25)
    env.step("lookup(apple)")
    _, reward, terminated, _, info = env.step("ANSWER: 7")  # the stock, not the price
    assert (reward, terminated, info["episode"]["correct"]) == (0.25, True, False)


def test_answer_without_lookup_and_unknown_items():
    env = started()
    obs, reward, terminated, _, info = env.step("lookup(pear)")
    assert obs[0]["content"] == "lookup(pear): unknown item. Known: apple"
    assert (reward, terminated) == (0.0, False) and not env.looked_up
    _, reward, terminated, _, info = env.step("ANSWER: 17")  # the example's price
    assert (reward, terminated, info["episode"]["looked_up"]) == (0.0, True, False)


def test_reply_with_neither_format_is_a_parse_error_and_the_episode_goes_on():
    env = started()
    obs, reward, terminated, _, info = env.step("The price of apple is about one pound.")
    assert obs == [{"role": "user", "content": REMINDER}]
    assert (reward, terminated) == (0.0, False)
    assert info["parse_error"]["kind"] == "no_action"
    assert env.step("lookup(apple)")[0][0]["content"].startswith("lookup(apple)")


def test_the_first_action_in_a_reply_wins():
    env = started()
    _, reward, terminated, _, _ = env.step("ANSWER: 42 or maybe lookup(apple)")
    assert (reward, terminated) == (1.0, True)  # a lucky guess still counts
    env = started()
    obs, _, terminated, _, _ = env.step("lookup(apple) then ANSWER: 42")
    assert not terminated and "price 42" in obs[0]["content"]


def test_registered_env_passes_the_checker_and_stops_at_three_turns():
    skyrl_gym.check_env(lambda: skyrl_gym.make("lookup-chat"))
    env = skyrl_gym.make("lookup-chat")
    env.reset(seed=0)
    for _ in range(2):
        assert env.step("hmm")[3] is False
    _, _, terminated, truncated, info = env.step("hmm")
    assert (terminated, truncated) == (False, True)
    assert info["episode"]["correct"] is False


def test_a_hostile_reply_is_handled_quickly():
    env = started()
    env.step("lookup(" + " " * 200_000 + "ANSWER:" + " " * 200_000 + "9" * 100_000)
    env = started()
    _, reward, terminated, _, info = env.step("ANSWER: " + "9" * 50)  # not a price
    assert (reward, terminated, info["parse_error"]["kind"]) == (0.0, False, "no_action")


_OLD_CALL = re.compile(
    r"lookup\s{0,3}\(\s{0,3}[\"']?([A-Za-z ]{0,40}?)[\"']?\s{0,3}\)", re.IGNORECASE
)
_OLD_ANSWER = re.compile(r"ANSWER\s{0,3}:\s{0,3}\$?\s{0,3}(\d{1,9})(?!\d)", re.IGNORECASE)


def _old_outcome(text: str) -> tuple[str, object]:
    """The env's parsing before it moved onto PatternFormat (hand-written regexes)."""
    call, answer = _OLD_CALL.search(text), _OLD_ANSWER.search(text)
    if call is not None and (answer is None or call.start() < answer.start()):
        return "lookup", call.group(1).strip().lower()
    if answer is None:
        return "none", None
    return "answer", int(answer.group(1))


@given(
    parts=st.lists(
        st.sampled_from(
            [
                "lookup(",
                "Lookup ( 'apple' )",
                ")",
                "ANSWER:",
                " 42",
                "answer : $ 7",
                "milk",
                " ",
                '"',
                "1234567890",
                "lookup(tea)",
                "x",
            ]
        ),
        max_size=8,
    )
)
@settings(max_examples=300, deadline=None)
def test_pattern_format_parses_exactly_as_the_old_regexes(parts):
    """The demo trains on this env: moving onto PatternFormat must not change any outcome."""
    text = "".join(parts)
    env = started()
    obs, reward, terminated, _, info = env.step(text)
    kind, value = _old_outcome(text)
    step = StepInfo.read(info)
    if kind == "lookup":
        assert step.tool_calls == (ToolCall("lookup", {"item": value}),) and not terminated
    elif kind == "none":
        assert step.parse_error is not None and obs == [{"role": "user", "content": REMINDER}]
    else:
        assert terminated and step.episode is not None and step.episode["answer"] == value
