"""`skyrl serve` against the official `openai` SDK, over real HTTP on 127.0.0.1.

Scripted policies (tiny byte-level tokenizer, Qwen/Hermes tools template) make the replies
known in advance; the tiny local model checks sampling (seeds, streaming, batching).
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import sys
import time

import openai
import pytest

from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.serving import ServeConfig, start_server
from skyrl_sdk.agents.trajectory import SegmentStart, read_trajectories

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "6*7"}}\n</tool_call>'


@pytest.fixture(scope="module")
def renderer(tiny_dir):
    from skyrl_sdk.agents.tiny import tiny_renderer

    return tiny_renderer(tiny_dir)


def non_canonical(renderer, text: str) -> list[int]:
    """`text` tokenized one character at a time: same text, not the tokenizer's own ids."""
    ids = [i for ch in text for i in renderer.encode(ch)]
    assert ids != list(renderer.encode(text)) and renderer.decode(ids) == text
    return ids


def serve(policy, renderer, tmp_path=None, **kwargs):
    config = ServeConfig(
        model_name="tiny", capture_dir=tmp_path, api_key=kwargs.pop("api_key", None), **kwargs
    )
    return start_server(policy, config, renderer=renderer)


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)


def as_message(message) -> dict:
    """What an OpenAI client sends back: the assistant message as it received it."""
    return message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})


def streamed(stream) -> tuple[str, list[dict], str | None, list]:
    """Content, accumulated tool calls, finish reason and chunks of a chat stream."""
    chunks = list(stream)
    text, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return text, [calls[k] for k in sorted(calls)], finish, chunks


# -- tool calls and capture ---------------------------------------------------------------


def test_tool_session_is_one_segment_of_the_scripted_ids(renderer, tmp_path) -> None:
    """A 4-turn tool-using session, streamed and not, sent back the way OpenAI clients do,
    is captured as one segment carrying exactly the scripted ids (non-canonical ones too)."""
    odd = non_canonical(renderer, CALL)
    script = ["Let me compute.\n" + CALL, odd, "The answer is 42.", "Bye."]
    policy = ScriptedPolicy(script, renderer=renderer)
    with serve(policy, renderer, tmp_path, api_key="main") as server:
        key = server.issue_session_key("episode-1")
        api = client(server.session_url("episode-1"), key)
        messages: list[dict] = [{"role": "user", "content": "What is 6*7? Check twice."}]

        first = api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Let me compute."
        (call,) = choice.message.tool_calls
        assert call.function.name == "calc"
        assert json.loads(call.function.arguments) == {"expr": "6*7"}
        messages += [as_message(choice.message)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "42"}]

        text, calls, finish, _ = streamed(
            api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, stream=True)
        )
        assert finish == "tool_calls" and text == ""
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
            ("calc", {"expr": "6*7"})
        ]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": "42"})
        third = api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        assert third.choices[0].message.content == "The answer is 42."
        assert third.choices[0].finish_reason == "stop"
        messages += [as_message(third.choices[0].message), {"role": "user", "content": "ok"}]
        last = api.chat.completions.create(
            model="tiny", messages=messages, tools=TOOLS, extra_body={"return_token_ids": True}
        )
        live = server.session_trajectory("episode-1")

    eot = renderer.end_of_turn_id
    assert live is not None and len(live.segments) == 1
    assert [t.token_ids for t in live.turns] == [
        (*renderer.encode(script[0]), eot),
        (*odd, eot),
        (*renderer.encode(script[2]), eot),
        (*renderer.encode(script[3]), eot),
    ]
    # The last prompt is the segment so far: the policy saw its own ids, not re-tokenized text.
    seg = live.segment_ids(0)
    prompt = last.model_extra["prompt_token_ids"]
    assert seg[: len(prompt)] == prompt and seg[len(prompt) :] == list(live.turns[-1].token_ids)
    assert [t.tool_calls[0].name if t.tool_calls else None for t in live.turns] == [
        "calc",
        "calc",
        None,
        None,
    ]
    assert live.turns[0].observation[0]["role"] == "tool"
    assert live.trainable
    (on_disk,) = read_trajectories(tmp_path / "episode-1.jsonl")
    assert on_disk == live


def test_capture_is_on_disk_after_each_turn(renderer, tmp_path) -> None:
    policy = ScriptedPolicy(["one", "two"], renderer=renderer)
    with serve(policy, renderer, tmp_path) as server:
        api = client(server.base_url)
        messages = [{"role": "user", "content": "hi"}]
        reply = api.chat.completions.create(model="tiny", messages=messages, user="alice")
        (first,) = read_trajectories(tmp_path / "alice.jsonl")
        assert [t.action for t in first.turns] == ["one"]
        messages += [as_message(reply.choices[0].message), {"role": "user", "content": "more"}]
        api.chat.completions.create(model="tiny", messages=messages, user="alice")
        (second,) = read_trajectories(tmp_path / "alice.jsonl")
        assert [t.action for t in second.turns] == ["one", "two"]
        assert len(second.segments) == 1


def test_an_edited_history_starts_a_recorded_new_segment(renderer) -> None:
    policy = ScriptedPolicy(["first reply", "second reply"], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.session_url("s"))
        messages = [{"role": "user", "content": "hi"}]
        api.chat.completions.create(model="tiny", messages=messages)
        edited = [
            *messages,
            {"role": "assistant", "content": "a reply the model never wrote"},
            {"role": "user", "content": "go on"},
        ]
        api.chat.completions.create(model="tiny", messages=edited)
        trajectory = server.session_trajectory("s")
    assert trajectory is not None
    assert [s.start for s in trajectory.segments] == [
        SegmentStart.EPISODE,
        SegmentStart.HISTORY_EDITED,
    ]
    assert [t.segment for t in trajectory.turns] == [0, 1]
    assert trajectory.segments[1].prompt_messages[1]["content"] == "a reply the model never wrote"


def test_a_malformed_tool_call_is_content_and_a_parse_error(renderer) -> None:
    broken = '<tool_call>\n{"name": "calc", "arguments": {"expr": </tool_call>'
    policy = ScriptedPolicy([broken, broken], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.session_url("s"))
        messages = [{"role": "user", "content": "hi"}]
        reply = api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        text, calls, finish, _ = streamed(
            api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, stream=True)
        )
        trajectory = server.session_trajectory("s")
    assert reply.choices[0].message.content == broken
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].finish_reason == "stop"
    assert (text, calls, finish) == (broken, [], "stop")
    assert trajectory is not None
    assert all(t.parse_error is not None for t in trajectory.turns)
    assert "not valid JSON" in trajectory.turns[0].parse_error.message


@pytest.mark.parametrize(
    "reply",
    [
        '[TOOL_CALLS] [{"name": "calc", "arguments": {"expr": "1+1"}}]',
        '{"name": "calc", "parameters": {"expr": "1+1"}}',
        '<|python_tag|>{"name": "calc", "parameters": {"expr": "1+1"}}',
    ],
    ids=["mistral", "llama3-json", "llama3-python-tag"],
)
def test_other_tool_formats_are_parsed(renderer, reply) -> None:
    policy = ScriptedPolicy([reply], renderer=renderer)
    with serve(policy, renderer) as server:
        out = client(server.base_url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], tools=TOOLS
        )
    (call,) = out.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("calc", {"expr": "1+1"})
    assert out.choices[0].finish_reason == "tool_calls"


def test_tools_off_with_tool_choice_none(renderer) -> None:
    policy = ScriptedPolicy([CALL], renderer=renderer)
    with serve(policy, renderer) as server:
        out = client(server.base_url).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            tools=TOOLS,
            tool_choice="none",
        )
    assert out.choices[0].message.content == CALL and out.choices[0].message.tool_calls is None


def test_scripts_keyed_by_session_replay_per_session(renderer) -> None:
    policy = ScriptedPolicy({"a": ["a1", "a2"], "b": ["b1"]}, renderer=renderer)
    with serve(policy, renderer) as server:
        ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}

        def say(session: str) -> str:
            out = client(server.session_url(session)).chat.completions.create(**ask)
            return out.choices[0].message.content

        assert [say("a"), say("b"), say("a")] == ["a1", "b1", "a2"]
        with pytest.raises(openai.InternalServerError, match="no actions for task 'c'"):
            say("c")


# -- keys -----------------------------------------------------------------------------------


def test_a_session_key_opens_only_its_session(renderer) -> None:
    policy = ScriptedPolicy(["ok"] * 4, renderer=renderer)
    with serve(policy, renderer, api_key="main-secret") as server:
        key = server.issue_session_key("mine")
        ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
        assert client(server.session_url("mine"), key).chat.completions.create(**ask)
        for url in (server.session_url("other"), server.base_url):
            with pytest.raises(openai.AuthenticationError, match="invalid API key"):
                client(url, key).chat.completions.create(**ask)
        assert client(server.session_url("other"), "main-secret").chat.completions.create(**ask)
        server.revoke_session_key("mine")
        with pytest.raises(openai.AuthenticationError):
            client(server.session_url("mine"), key).chat.completions.create(**ask)


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "param", "needle"),
    [
        ({"messages": []}, "messages", "at least 1"),
        ({"max_tokens": -1}, "max_tokens", "greater than or equal to 1"),
        ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"max_completion_tokens": 0}, "max_completion_tokens", "greater than or equal to 1"),
        ({"temperature": -1}, "temperature", "greater than or equal to 0"),
        ({"n": 0}, "n", "greater than or equal to 1"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role", "one of"),
        ({"top_logprobs": 3}, "top_logprobs", "needs logprobs"),
        ({"tool_choice": "sometimes"}, "tool_choice", "must be"),
        ({"tool_choice": "required"}, "tool_choice", "only allowed when tools"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "rm"}}},
            "tool_choice",
            "not in tools",
        ),
    ],
)
def test_bad_requests_are_400_naming_the_field(renderer, change, param, needle) -> None:
    policy = ScriptedPolicy(["never"], renderer=renderer)
    with serve(policy, renderer) as server:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], **change}
        with pytest.raises(openai.BadRequestError) as caught:
            client(server.base_url).chat.completions.create(**body)
    error = caught.value
    assert error.status_code == 400
    assert error.body["param"] == param and error.body["type"] == "invalid_request_error"
    assert needle in error.message
    assert policy.calls == 0


def test_model_is_required_and_must_exist(renderer) -> None:
    policy = ScriptedPolicy(["never"], renderer=renderer)
    with serve(policy, renderer) as server:
        import httpx

        response = httpx.post(
            f"{server.base_url}/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}]},
        )
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "model"
        api = client(server.base_url)
        with pytest.raises(openai.NotFoundError, match="'gpt-9' does not exist") as caught:
            api.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
        assert caught.value.body["code"] == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            api.models.retrieve("gpt-9")
        model = api.models.retrieve("tiny")
        assert model.id == "tiny" and model.created > 0
        assert [m.id for m in api.models.list()] == ["tiny"]
        missing = httpx.get(f"{server.base_url}/nothing-here")
        assert missing.status_code == 404 and "error" in missing.json()
        bad_json = httpx.post(f"{server.base_url}/chat/completions", content=b"{nope")
        assert (
            bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
        )


# -- streaming and cancellation -----------------------------------------------------------


def test_streamed_usage_chunk_and_stop_strings(renderer) -> None:
    policy = ScriptedPolicy(["alpha beta STOP gamma"] * 2, renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.base_url)
        ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stop": "STOP"}
        plain = api.chat.completions.create(**ask)
        text, _, finish, chunks = streamed(
            api.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True})
        )
    assert plain.choices[0].message.content == text == "alpha beta "
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == plain.usage.total_tokens


def test_a_disconnect_cancels_the_generation(renderer) -> None:
    long_reply = "word " * 2000
    policy = ScriptedPolicy([long_reply], renderer=renderer, token_delay_s=0.002)
    with serve(policy, renderer) as server:
        api = client(server.base_url)
        stream = api.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=10**9,
            stream=True,
        )
        for k, _ in enumerate(stream):
            if k == 3:
                break
        stream.close()
        deadline = time.monotonic() + 10
        while policy.active_streams and time.monotonic() < deadline:
            time.sleep(0.01)
        assert policy.active_streams == 0
        sent = policy.streamed_tokens
        time.sleep(0.2)
        assert policy.streamed_tokens == sent < len(renderer.encode(long_reply))
        assert server.session_trajectory("default") is None  # an abandoned turn is not captured


# -- the tiny model: seeds, streaming, batching, limits -----------------------------------


@pytest.fixture(scope="module")
def tiny_server(tiny_dir, renderer):
    from skyrl_sdk.agents.engine import LocalEngine

    engine = LocalEngine.from_pretrained(tiny_dir, name="tiny", max_batch_size=8)
    with serve(engine, renderer) as server:
        yield server, engine


def test_seed_gives_the_same_tokens_streamed_or_not_alone_or_batched(tiny_server) -> None:
    server, _ = tiny_server
    api = client(server.base_url)
    ask = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "count the apples"}],
        "max_tokens": 24,
        "temperature": 1.0,
        "seed": 1234,
        "extra_body": {"return_token_ids": True},
    }
    alone = api.chat.completions.create(**ask)
    text, _, _, chunks = streamed(api.chat.completions.create(**ask, stream=True))
    assert text == alone.choices[0].message.content
    assert (
        chunks[-1].choices[0].model_extra["token_ids"] == alone.choices[0].model_extra["token_ids"]
    )

    others = [{**ask, "seed": s, "max_tokens": 30} for s in (1, 2, 3)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(api.chat.completions.create, **o) for o in others]
        batched = pool.submit(api.chat.completions.create, **ask)
        [f.result() for f in futures]
    assert (
        batched.result().choices[0].model_extra["token_ids"]
        == alone.choices[0].model_extra["token_ids"]
    )
    # n choices: seed, seed + 1, ...: choice 0 equals the single request.
    both = api.chat.completions.create(**ask, n=2)
    assert both.choices[0].message.content == alone.choices[0].message.content


def test_completions_stream_equals_plain_and_logprobs(tiny_server) -> None:
    server, _ = tiny_server
    api = client(server.base_url)
    ask = {"model": "tiny", "prompt": "The farmer has", "max_tokens": 16, "seed": 7}
    plain = api.completions.create(**ask, logprobs=2, extra_body={"return_token_ids": True})
    pieces = list(api.completions.create(**ask, stream=True))
    assert "".join(p.choices[0].text for p in pieces if p.choices) == plain.choices[0].text
    choice = plain.choices[0]
    assert len(choice.logprobs.token_logprobs) == len(choice.model_extra["token_ids"])
    assert all(len(alts) == 2 for alts in choice.logprobs.top_logprobs)

    chat = api.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=8,
        seed=3,
        logprobs=True,
        top_logprobs=3,
    )
    entries = chat.choices[0].logprobs.content
    assert len(entries) == chat.usage.completion_tokens
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in entries)


def test_max_tokens_is_bounded_by_the_context(tiny_server) -> None:
    server, engine = tiny_server
    api = client(server.base_url)
    with pytest.raises(openai.BadRequestError, match="maximum context length") as caught:
        api.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=10**9
        )
    assert caught.value.body["code"] == "context_length_exceeded"
    assert caught.value.body["param"] == "max_tokens"
    huge = "apples " * (engine.max_context_tokens * 3)
    with pytest.raises(openai.BadRequestError, match="context"):
        api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": huge}])


def _wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_disconnect_frees_the_engine(tiny_server) -> None:
    """Greedy on the tiny model never stops before the context is full (~2000 tokens,
    a minute or more): a client that leaves must not leave that running, streamed or not."""
    import httpx

    server, engine = tiny_server
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": 0}
    before = engine.stats().cancelled
    stream = client(server.base_url).chat.completions.create(**ask, stream=True)
    for k, _ in enumerate(stream):
        if k == 2:
            break
    stream.close()
    assert _wait_for(lambda: engine.stats().cancelled == before + 1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/chat/completions", json=ask, timeout=1.0)
    assert _wait_for(lambda: engine.stats().cancelled == before + 2)
    generated = engine.stats().generated_tokens
    time.sleep(0.3)
    assert engine.stats().generated_tokens == generated  # idle again


def test_content_before_a_tool_call_streams_as_it_is_sampled(renderer) -> None:
    reply = "Let me compute that for you.\n" + CALL
    policy = ScriptedPolicy([reply, reply, " " + reply], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.base_url)
        ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
        plain = api.chat.completions.create(**ask, user="a")
        text, calls, finish, chunks = streamed(
            api.chat.completions.create(**ask, user="b", stream=True)
        )
        leading, _, _, _ = streamed(api.chat.completions.create(**ask, user="b", stream=True))
    assert plain.choices[0].message.content == text == "Let me compute that for you."
    assert finish == "tool_calls" and [c["name"] for c in calls] == ["calc"]
    kinds = [
        "call" if c.choices[0].delta.tool_calls else "text"
        for c in chunks
        if c.choices and (c.choices[0].delta.content or c.choices[0].delta.tool_calls)
    ]
    assert kinds.count("text") > 3 and kinds[-1] == "call"  # text in pieces, then the call
    assert leading == "Let me compute that for you."  # stripped, as the plain answer is


def test_a_session_dropped_from_memory_continues_from_its_file(renderer, tmp_path) -> None:
    """Memory is bounded (least recently used sessions are dropped, `end_session` drops one),
    and a dropped session that comes back continues its captured trajectory exactly."""
    policy = ScriptedPolicy(["first", CALL, "third"], renderer=renderer)
    with serve(policy, renderer, tmp_path) as server:
        server.store.max_sessions = 1
        api = client(server.session_url("long"))
        messages: list[dict] = [{"role": "user", "content": "hi"}]
        out = api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        messages += [as_message(out.choices[0].message), {"role": "user", "content": "go"}]
        out = api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        (call,) = out.choices[0].message.tool_calls
        messages += [as_message(out.choices[0].message)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "42"}]
        client(server.session_url("other")).models.list()  # no turn: not a session yet
        api2 = client(server.base_url)
        api2.chat.completions.create(model="tiny", messages=messages[:1], user="evicts-long")
        server.end_session("evicts-long")
        api.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        trajectory = server.session_trajectory("long")
    assert trajectory is not None
    assert [t.action for t in trajectory.turns] == ["first", CALL, "third"]
    assert len(trajectory.segments) == 1


def test_n_choices_streamed_and_max_completion_tokens(renderer) -> None:
    policy = ScriptedPolicy(["one two three four five"] * 2 + ["a", "b"], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.session_url("s"))
        ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
        cut = api.chat.completions.create(**ask, max_completion_tokens=3, logprobs=True)
        assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3
        assert [e.logprob for e in cut.choices[0].logprobs.content] == [0.0] * 3
        api.chat.completions.create(**ask)
        chunks = list(api.chat.completions.create(**ask, n=2, stream=True))
    texts = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert sorted(texts.values()) == ["a", "b"] and finishes == {0: "stop", 1: "stop"}


@pytest.mark.parametrize("stream", [False, True])
def test_the_choice_a_client_continues_from_is_the_captured_turn(renderer, stream) -> None:
    """With n > 1, the turn is the choice the next request continues from (here choice 1):
    one segment, that choice's own ids and logprobs, not an edited history."""
    policy = ScriptedPolicy(["left", "right", "done"], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.session_url("n"))
        messages = [{"role": "user", "content": "pick"}]
        ask = {"model": "tiny", "messages": messages, "n": 2}
        if stream:
            texts = {0: "", 1: ""}
            for chunk in api.chat.completions.create(**ask, stream=True):
                for choice in chunk.choices:
                    texts[choice.index] += choice.delta.content or ""
            chosen = {"role": "assistant", "content": texts[1]}
        else:
            chosen = as_message(api.chat.completions.create(**ask).choices[1].message)
        assert chosen["content"] == "right"
        follow = [*messages, chosen, {"role": "user", "content": "go on"}]
        api.chat.completions.create(model="tiny", messages=follow)
        trajectory = server.session_trajectory("n")
    assert trajectory is not None
    assert [t.action for t in trajectory.turns] == ["right", "done"]
    assert [s.start for s in trajectory.segments] == [SegmentStart.EPISODE]
    first = trajectory.turns[0]
    assert renderer.decode(first.token_ids).startswith("right")
    assert first.logprobs is not None and len(first.logprobs) == len(first.token_ids)
    assert trajectory.turns[0].observation[-1]["content"] == "go on"
    assert trajectory.trainable


def test_repeating_one_request_with_n_keeps_a_bounded_number_of_alternatives(renderer) -> None:
    """An adversarial client sending the same n=16 request again and again must not grow the
    server's memory: only the latest request's other choices are kept."""
    from skyrl_sdk.agents.serving.protocol import MAX_N

    policy = ScriptedPolicy([f"reply {i}" for i in range(4 * MAX_N)], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.session_url("flood"))
        ask = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": MAX_N}
        for _ in range(4):
            api.chat.completions.create(**ask)
        kept = server.store._sessions["flood"].alternatives  # what the server holds in memory
    assert len(kept) == MAX_N - 1
    assert [a.action for a in kept] == [f"reply {i}" for i in range(3 * MAX_N + 1, 4 * MAX_N)]


def test_token_prompts_that_extend_the_last_turn_are_one_segment(renderer) -> None:
    """`/v1/completions` with token ids (how token-native clients call): a prompt that starts
    with the previous prompt plus the sampled ids continues the segment; the ids in between
    are the previous turn's observation."""
    policy = ScriptedPolicy(["first", "second"], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server.session_url("tok"))
        prompt = list(renderer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
        extra = {"return_token_ids": True}
        one = api.completions.create(model="tiny", prompt=prompt, extra_body=extra)
        sampled = one.choices[0].model_extra["token_ids"]
        observation = list(renderer.encode("\n<|im_start|>user\nmore<|im_end|>\n"))
        api.completions.create(model="tiny", prompt=prompt + sampled + observation)
        trajectory = server.session_trajectory("tok")
    assert trajectory is not None and len(trajectory.segments) == 1
    assert list(trajectory.turns[0].observation_ids) == observation
    assert trajectory.segment_ids(0)[: len(prompt) + len(sampled)] == prompt + sampled


@pytest.mark.parametrize("missing", [(), ("httptools",), ("uvloop",), ("httptools", "uvloop")])
def test_the_c_http_parser_and_loop_are_optional(renderer, monkeypatch, missing) -> None:
    from skyrl_sdk.agents.serving.runner import uvicorn_options

    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError
    options = uvicorn_options()
    assert (options["http"] == "h11") == ("httptools" in missing or not _importable("httptools"))
    assert (options["loop"] == "asyncio") == ("uvloop" in missing or not _importable("uvloop"))
    with serve(ScriptedPolicy(["fine"], renderer=renderer), renderer) as server:
        out = client(server.base_url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}]
        )
    assert out.choices[0].message.content == "fine"


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
