from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

import skyrl_gym
from skyrl_gym.envs.search.env import SearchEnv, bundled_tasks
from skyrl_gym.tasks import TaskError
from skyrl_sdk.tools import ToolCall

_DOC = re.compile(r"^Doc \d+ \(Title: ([^)]*)\) (.*)$", re.M)


def read_answer(question: str, observation: str) -> str:
    """A scripted reader: pick the answer out of the passages, without looking at the gold."""
    docs = _DOC.findall(observation)
    named = re.findall(r"`([\w.]+)`", question)
    if question.startswith("What is the default value"):
        param, func = named
        for title, text in docs:
            if title == func and (m := re.search(rf"\b{param}=([^,)]+)", text)):
                return m.group(1)
        return ""
    if "standard library has this docstring" in question:
        return docs[0][0] if docs else ""
    module = named[0]
    for title, _ in docs:
        if title.startswith(module + ".") and title.count(".") == 1:
            return title.split(".")[-1]
    return ""


def play(env: Any, task: dict[str, Any], policy_answer: str | None = None) -> tuple[float, dict]:
    env.reset(options={"task": task})
    messages, reward, terminated, truncated, info = env.step(
        f"<think>I should look this up.</think>\n<search>{task['question']}</search>"
    )
    assert not terminated and not truncated and reward == 0.0
    observation = messages[0]["content"]
    assert observation.startswith("<information>") and observation.endswith("</information>")
    assert info["search"][0]["outcome"] == "ok"
    given = (
        policy_answer if policy_answer is not None else read_answer(task["question"], observation)
    )
    _, reward, terminated, truncated, info = env.step(f"<answer>{given}</answer>")
    assert terminated and not truncated
    return reward, info


def test_scripted_policy_gets_reward_1_and_a_wrong_answer_0(index_dir: Path) -> None:
    env = skyrl_gym.make("search", index=index_dir)
    rewards = [play(env, task)[0] for task in bundled_tasks()]
    assert set(rewards) <= {0.0, 1.0}
    assert sum(rewards) / len(rewards) >= 0.9
    task = next(t for t in bundled_tasks() if t["doc_id"] == "heapq.nlargest")
    reward, info = play(env, task)
    assert reward == 1.0
    assert info["episode"]["correct"] and info["episode"]["searches"] == 1
    assert play(env, task, policy_answer="nsmallest")[0] == 0.0
    env.close()


def test_f1_reward_gives_partial_credit(index: Any) -> None:
    task = {"task_id": "t", "question": "Which module?", "answers": ["brown fox"]}
    env = SearchEnv([task], retriever=index, reward="f1")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("<answer>quick brown fox</answer>")
    assert terminated and reward == pytest.approx(0.8)
    assert info["episode"]["exact_match"] == 0.0


@pytest.mark.parametrize("fmt", ["hermes", "openai"])
def test_native_tool_call_formats(index: Any, fmt: str) -> None:
    env = SearchEnv(retriever=index, tool_format=fmt)
    env.reset(seed=0)
    task = env.task

    def call(name: str, args: dict[str, str]) -> str:
        if fmt == "hermes":
            return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"
        return env.tool_format.render_call(ToolCall(name, args, "call_1"))

    messages, _, terminated, _, _ = env.step(call("search", {"query": task["question"]}))
    assert not terminated and messages[0]["role"] == "tool"
    assert messages[0]["content"].startswith("<information>\nDoc 1 (Title: ")
    _, reward, terminated, _, _ = env.step(call("answer", {"answer": task["answers"][0]}))
    assert terminated and reward == 1.0


def test_bad_input_is_an_observation(index: Any) -> None:
    env = skyrl_gym.make("search", retriever=index)
    env.reset(seed=1)
    messages, reward, terminated, truncated, info = env.step("<search>  </search>")
    assert "query is empty" in messages[0]["content"] and not (terminated or truncated)
    assert info["search"][0]["outcome"] == "empty_query"
    messages, _, _, _, info = env.step("<search>unclosed")
    assert info["parse_error"]["kind"] == "unclosed_tag"
    messages, _, _, _, info = env.step("I think the answer is 42.")
    assert info["parse_error"]["kind"] == "no_action"
    messages, _, terminated, truncated, info = env.step("<search>zzzzqqqq xxyyzz</search>")
    assert "No documents match" in messages[0]["content"]
    assert info["search"][0]["outcome"] == "no_results"
    assert truncated and info["truncated_by"] == "max_turns"  # 4 turns by default


def test_server_down_is_a_clear_observation() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    env = SearchEnv(search_url=f"http://127.0.0.1:{port}", retries=2, timeout_s=1.0)
    env.retriever.retry = type(env.retriever.retry)(attempts=2, backoff_s=0.0)
    env.reset(seed=0)
    messages, reward, terminated, truncated, info = env.step("<search>heapq</search>")
    content = messages[0]["content"]
    assert "Search error (unreachable)" in content and f"127.0.0.1:{port}/retrieve" in content
    assert "after 2 attempts" in content
    assert info["search"][0]["outcome"] == "failed"
    assert (reward, terminated, truncated) == (0.0, False, False)
    _, _, terminated, _, info = env.step("<answer>x</answer>")
    assert terminated and info["episode"]["search_failures"] == 1
    env.close()
    env.close()


def test_async_step_and_task_validation(index: Any) -> None:
    env = SearchEnv(retriever=index)

    async def episode() -> float:
        await env.areset(seed=2)
        await env.astep(f"<search>{env.task['question']}</search>")
        return (await env.astep(f"<answer>{env.task['answers'][0]}</answer>"))[1]

    assert asyncio.run(episode()) == 1.0
    with pytest.raises(TaskError, match="gold answers"):
        env.reset(options={"task": {"task_id": "x", "question": "q"}})
    env.reset(options={"task": {"task_id": "y", "question": "q", "golden_answers": ["a"]}})
    assert env.step("<answer>A</answer>")[1] == 1.0
    with pytest.raises(ValueError, match="at most one"):
        SearchEnv(retriever=index, search_url="http://127.0.0.1:1")
