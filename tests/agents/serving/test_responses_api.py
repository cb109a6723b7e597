"""`POST /v1/responses` against real clients over real HTTP on 127.0.0.1: the official `openai`
SDK (streamed and not, function and custom tools, `previous_response_id`), openai-agents with
its default (Responses) provider and `codex exec` (Codex CLI 0.171.0, `wire_api =
"responses"`), each with a scripted policy whose replies include non-canonical token ids, each
session captured as one segment of exactly the scripted ids; and the limits chat completions
has (keys, body and stop caps, header deadline, token budget, queue cap and fair share).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from skyrl_sdk.agents.policy import PolicyError, TokenChunk
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.serving import ServeConfig, responses_api, start_server
from skyrl_sdk.agents.trajectory import SegmentStart
from skyrl_sdk.benchmarks import harness_venv

HARNESSES = Path(__file__).parents[1] / "harnesses"
MAIN = "sk-responses-main"
TOOLS = [
    {
        "type": "function",
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
    }
]
PATCH_GRAMMAR = r"""start: begin hunk{1,2} "*** End Patch" LF?
begin: "*** Begin Patch" LF
hunk: "*** Add File: " PATH LF add_line{1,3}
add_line: "+" /[a-z "\\]{0,12}/ LF -> line
PATH: /[a-z]{1,8}\.txt/
%import common.LF
"""
"""A grammar of the shape of Codex's `apply_patch` (written here, kept small and bounded so
the random tiny model finishes a call)."""

PATCH_RE = r'\*\*\* Begin Patch\n(\*\*\* Add File: [a-z]{1,8}\.txt\n(\+[a-z "\\]{0,12}\n){1,3}){1,2}\*\*\* End Patch\n?'
"""The same language as a Python regex."""

GRAMMAR_FORMAT = {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR}

TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]
CALL_EVENTS = [
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
]


@pytest.fixture(scope="module")
def renderer(tiny_dir):
    from skyrl_sdk.agents.tiny import tiny_renderer

    return tiny_renderer(tiny_dir)


def call(name: str, **arguments: Any) -> str:
    """A scripted tool-call reply in the tiny template's Hermes/Qwen format."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def non_canonical(renderer, text: str) -> list[int]:
    """`text` tokenized one character at a time: same text, not the tokenizer's own ids."""
    ids = [i for ch in text for i in renderer.encode(ch)]
    assert ids != list(renderer.encode(text)) and renderer.decode(ids) == text
    return ids


def sampled(renderer, action: str | Sequence[int]) -> tuple[int, ...]:
    """The ids the scripted policy samples for an action (it appends end-of-turn)."""
    ids = renderer.encode(action) if isinstance(action, str) else tuple(action)
    return (*ids, renderer.end_of_turn_id)


def check_one_segment(server, session: str, renderer, script: Sequence) -> None:
    """The session is one segment whose turns are exactly the scripted ids, each prompt the
    previous prompt + its sampled ids + the harness's new ids."""
    t = server.session_trajectory(session)
    assert t is not None, f"no capture for session {session!r}"
    assert len(t.segments) == 1, [s.start for s in t.segments]
    assert t.segments[0].start is SegmentStart.EPISODE
    assert [turn.token_ids for turn in t.turns] == [sampled(renderer, a) for a in script]
    (sample,) = t.training_samples()
    assert sum(sample.loss_mask) == sum(len(turn.token_ids) for turn in t.turns)


def serve(policy, renderer, **config: Any):
    return start_server(
        policy, ServeConfig(model_name="tiny", api_key=MAIN, **config), renderer=renderer
    )


def client(server, session: str, **issue: Any) -> openai.OpenAI:
    key = server.issue_session_key(session, **issue)
    return openai.OpenAI(base_url=server.session_url(session), api_key=key, max_retries=0)


def sent_back(output) -> list[dict]:
    """Output items as a client sends them back."""
    return [item.model_dump(exclude_none=True) for item in output]


# -- the openai SDK -------------------------------------------------------------------------


def test_sdk_tool_round_trip_streamed_and_not_is_one_segment(renderer) -> None:
    """`responses.create` with a function tool: a call (text before it), the call sent back
    as items, a streamed call scripted as non-canonical ids, continued by
    `previous_response_id`, and a final text; one segment of exactly the scripted ids."""
    odd = non_canonical(renderer, call("calc", expr="6*7"))
    script = ["Let me compute.\n" + call("calc", expr="6*7"), odd, "The answer is 42."]
    with serve(ScriptedPolicy(script, renderer=renderer), renderer) as server:
        api = client(server, "sdk")
        first = api.responses.create(
            model="tiny", instructions="Be brief.", input="What is 6*7?", tools=TOOLS
        )
        assert first.status == "completed" and first.object == "response"
        message, fn = first.output
        assert message.type == "message" and message.content[0].text == "Let me compute."
        assert fn.type == "function_call" and fn.name == "calc"
        assert json.loads(fn.arguments) == {"expr": "6*7"} and fn.call_id
        assert first.usage.input_tokens > 0
        assert first.usage.output_tokens == len(sampled(renderer, script[0]))
        items = [
            {"role": "user", "content": "What is 6*7?"},
            *sent_back(first.output),
            {"type": "function_call_output", "call_id": fn.call_id, "output": "42"},
        ]
        events = list(
            api.responses.create(
                model="tiny", instructions="Be brief.", input=items, tools=TOOLS, stream=True
            )
        )
        assert [e.type for e in events] == [*TEXT_EVENTS[:2], *CALL_EVENTS, "response.completed"]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        second = events[-1].response
        (streamed_call,) = second.output
        assert events[3].delta == streamed_call.arguments == events[4].arguments
        assert json.loads(streamed_call.arguments) == {"expr": "6*7"}
        third = api.responses.create(
            model="tiny",
            instructions="Be brief.",
            previous_response_id=second.id,
            input=[
                {"type": "function_call_output", "call_id": streamed_call.call_id, "output": "42"}
            ],
            tools=TOOLS,
        )
        assert third.output_text == "The answer is 42." and third.previous_response_id == second.id
        check_one_segment(server, "sdk", renderer, script)


def test_streamed_text_events_add_up_to_the_reply(renderer) -> None:
    """A streamed text reply: the documented event order, deltas adding up to the final text;
    the SDK's `responses.stream` helper accumulates the same response."""
    text = "Hello there, general Kenobi."
    policy = ScriptedPolicy([text, non_canonical(renderer, text)], renderer=renderer)
    with serve(policy, renderer) as server:
        api = client(server, "s")
        events = list(api.responses.create(model="tiny", input="hi", stream=True))
        kinds = [e.type for e in events]
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]] == TEXT_EVENTS
        assert "".join(deltas) == text and events[-1].response.output_text == text
        item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
        assert item_ids == {events[-1].response.output[0].id}
        with api.responses.stream(model="tiny", input="hi again") as stream:
            final = stream.get_final_response()
        odd = sampled(renderer, non_canonical(renderer, text))
        assert final.output_text == text and final.usage.output_tokens == len(odd)


def test_a_disconnect_cancels_the_generation(renderer) -> None:
    long_reply = "word " * 2000
    policy = ScriptedPolicy([long_reply], renderer=renderer, token_delay_s=0.002)
    with serve(policy, renderer) as server:
        stream = client(server, "s").responses.create(model="tiny", input="x", stream=True)
        for k, _ in enumerate(stream):
            if k == 5:
                break
        stream.close()
        deadline = time.monotonic() + 10
        while policy.active_streams and time.monotonic() < deadline:
            time.sleep(0.01)
        assert policy.active_streams == 0
        sent = policy.streamed_tokens
        time.sleep(0.2)
        assert policy.streamed_tokens == sent < len(renderer.encode(long_reply))
        assert server.session_trajectory("s") is None  # an abandoned turn is not captured


class FailingMidStream(ScriptedPolicy):
    """Streams two tokens of its reply, then fails (an engine error mid-answer)."""

    async def generate_stream(self, prompt_token_ids, sampling, *, context=None):
        completion = await self.generate(prompt_token_ids, sampling, context=context)
        for token in completion.token_ids[:2]:
            yield TokenChunk((token,), None)
        raise PolicyError("the engine fell over")


def test_a_failure_mid_stream_is_response_failed(renderer) -> None:
    policy = FailingMidStream(["Hello there, world."], renderer=renderer)
    with serve(policy, renderer) as server:
        events = list(client(server, "s").responses.create(model="tiny", input="x", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.failed"
    assert events[-1].response.error.code == "policy_error"
    assert "fell over" in events[-1].response.error.message
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_custom_tool_and_reasoning_items_keep_one_segment(renderer) -> None:
    """A custom (freeform) tool's call is a `custom_tool_call` with its `input`; sent back with
    a `reasoning` item (ignored) and its output, the session stays one segment."""
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    script = [non_canonical(renderer, call("apply_patch", input=patch)), "Patched."]
    custom = [{"type": "custom", "name": "apply_patch", "description": "Apply a patch."}]
    with serve(ScriptedPolicy(script, renderer=renderer), renderer) as server:
        api = client(server, "c")
        first = api.responses.create(model="tiny", input="add a.txt", tools=custom)
        (item,) = first.output
        assert item.type == "custom_tool_call" and item.input == patch
        items = [
            {"role": "user", "content": [{"type": "input_text", "text": "add a.txt"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
            *sent_back(first.output),
            {"type": "custom_tool_call_output", "call_id": item.call_id, "output": "Done!"},
        ]
        second = api.responses.create(model="tiny", input=items, tools=custom)
        assert second.output_text == "Patched."
        check_one_segment(server, "c", renderer, script)


def test_a_side_conversation_is_an_auxiliary_segment(renderer) -> None:
    """A title request (other instructions) and a sub-agent (another `prompt_cache_key`) in
    the middle of a session are segments of their own marked auxiliary; the main conversation
    stays one segment and is all that is trained on by default."""
    script = ["Main one.", "A title", "Sub-agent reply.", "Main two."]
    with serve(ScriptedPolicy(script, renderer=renderer), renderer) as server:
        api = client(server, "s")
        main = {"model": "tiny", "instructions": "You are the main agent."}
        first = api.responses.create(**main, input="hi")
        api.responses.create(model="tiny", instructions="Write a title.", input="hi")
        api.responses.create(**main, input="help", extra_body={"prompt_cache_key": "sub-1"})
        last = api.responses.create(**main, input="more", previous_response_id=first.id)
        assert last.output_text == "Main two."
        t = server.session_trajectory("s")
    starts = [seg.start for seg in t.segments]
    assert starts == [SegmentStart.EPISODE, SegmentStart.AUXILIARY, SegmentStart.AUXILIARY]
    assert [turn.segment for turn in t.turns] == [0, 1, 2, 0]
    (sample,) = t.training_samples()
    assert sum(sample.loss_mask) == len(sampled(renderer, "Main one.")) + len(
        sampled(renderer, "Main two.")
    )


def test_previous_response_ids_are_per_session_and_evicted_least_recent_first(
    renderer,
) -> None:
    policy = ScriptedPolicy(lambda context: "ok", renderer=renderer)
    with serve(policy, renderer, max_stored_responses=2) as server:
        api, other = client(server, "a"), client(server, "b")
        r1, r2 = (api.responses.create(model="tiny", input=x) for x in ("one", "two"))
        with pytest.raises(openai.NotFoundError) as foreign:
            other.responses.create(model="tiny", input="x", previous_response_id=r1.id)
        assert foreign.value.body["param"] == "previous_response_id"
        api.responses.create(model="tiny", input="again", previous_response_id=r1.id)  # r1 used
        # Kept: r1 (just used) and the response to "again"; r2 was the least recently used.
        with pytest.raises(openai.NotFoundError) as evicted:
            api.responses.create(model="tiny", input="x", previous_response_id=r2.id)
        assert evicted.value.body["code"] == "previous_response_not_found"
        assert api.responses.create(model="tiny", input="y", previous_response_id=r1.id).id
        unstored = api.responses.create(model="tiny", input="z", store=False)
        with pytest.raises(openai.NotFoundError):
            api.responses.create(model="tiny", input="x", previous_response_id=unstored.id)


def test_stored_responses_are_retrieved_and_deleted_per_session(renderer) -> None:
    """`GET /v1/responses/{id}` answers the stored response (streamed or not) in its own
    session only; `DELETE` forgets it, after which GET and `previous_response_id` are 404;
    `store: false` responses are never kept."""
    policy = ScriptedPolicy(lambda context: "kept", renderer=renderer)
    with serve(policy, renderer) as server:
        api, other = client(server, "a"), client(server, "b")
        plain = api.responses.create(model="tiny", input="one")
        streamed = list(api.responses.create(model="tiny", input="two", stream=True))[-1].response
        for made in (plain, streamed):
            got = api.responses.retrieve(made.id)
            assert got.id == made.id and got.status == "completed" and got.output_text == "kept"
            assert got.usage.output_tokens == made.usage.output_tokens
        with pytest.raises(openai.NotFoundError) as foreign:
            other.responses.retrieve(plain.id)
        assert foreign.value.body["code"] == "not_found"
        with pytest.raises(openai.NotFoundError):  # nor may it forget another's response
            other.responses.delete(plain.id)
        assert api.responses.retrieve(plain.id).id == plain.id
        api.responses.delete(plain.id)
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(plain.id)
        with pytest.raises(openai.NotFoundError):
            api.responses.create(model="tiny", input="x", previous_response_id=plain.id)
        with pytest.raises(openai.NotFoundError):
            api.responses.delete(plain.id)
        unstored = api.responses.create(model="tiny", input="z", store=False)
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(unstored.id)
        assert api.responses.retrieve(streamed.id).id == streamed.id


def test_skyrl_serve_max_stored_responses_bounds_what_is_kept(tmp_path) -> None:
    """`skyrl serve --max-stored-responses 1`: the second response evicts the first."""
    import signal

    from tests.agents.serving.test_server_cli import ENV, SKYRL, free_port, wait_up

    script = tmp_path / "script.json"
    script.write_text(json.dumps(["one", "two"]))
    port = free_port()
    args = ["serve", "--policy", f"scripted:{script}", "--port", str(port), "--quiet"]
    proc = subprocess.Popen(
        [*SKYRL, *args, "--max-stored-responses", "1"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_up(proc, f"http://127.0.0.1:{port}")
        api = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/sessions/s/v1", api_key="x", max_retries=0
        )
        first, second = (api.responses.create(model="scripted", input=x) for x in "ab")
        assert api.responses.retrieve(second.id).output_text == "two"
        with pytest.raises(openai.NotFoundError):
            api.responses.retrieve(first.id)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def test_items_fold_into_the_chat_messages_a_reply_is_remembered_as() -> None:
    from skyrl_sdk.agents.serving.responses_protocol import input_messages

    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "A"}]},
        {"role": "developer", "content": "B"},
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hm."}],
        },
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
        {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "raw"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {
            "type": "custom_tool_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "two"}],
        },
    ]
    assert input_messages("I", items) == [
        {"role": "system", "content": "I\n\nA\n\nB"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Hm.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "g", "arguments": {"input": "raw"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one", "name": "f"},
        {"role": "tool", "tool_call_id": "c2", "content": "two", "name": "g"},
    ]


def test_response_log_keeps_a_bounded_lru() -> None:
    log = responses_api.ResponseLog(3)
    for k in range(3):
        log.put(f"r{k}", "s", [{"k": k}])
    assert log.get("r0", "s") == ({"k": 0},)  # r0 now most recent
    log.put("r3", "s", [])
    assert len(log) == 3
    with pytest.raises(responses_api.ApiError):
        log.get("r1", "s")
    assert log.get("r0", "s") and log.get("r2", "s") and log.get("r3", "s") == ()


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "calc"}}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"tools": None, "tool_choice": "required"}, "tool_choice"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
        (
            {"tools": [{"type": "custom", "name": "g", "format": {"type": "grammar"}}]},
            "tools.0.format",
        ),
        (  # a grammar the scripted policy cannot enforce: a 400, never ignored
            {"tools": [{"type": "custom", "name": "g", "format": GRAMMAR_FORMAT}]},
            "tools.0.format",
        ),
        (
            {
                "tools": [
                    {"type": "custom", "name": "g", "format": {**GRAMMAR_FORMAT, "syntax": "peg"}}
                ]
            },
            "tools.0.format",
        ),
        ({"tools": [{"type": "function"}]}, "tools.0.name"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input.0.content"),
        (
            {"input": [{"type": "function_call", "name": "calc", "arguments": "[1]"}]},
            "input.0.arguments",
        ),
        ({"stop": ["x"] * 5}, "stop"),
        ({"stop": "y" * 257}, "stop"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"temperature": 3}, "temperature"),
    ],
)
def test_bad_requests_are_400_naming_the_field(renderer, change, param) -> None:
    with serve(ScriptedPolicy(["x"], renderer=renderer), renderer) as server:
        api = client(server, "s")
        body = {"model": "tiny", "input": "hi", "tools": TOOLS, **change}
        body = {k: v for k, v in body.items() if v is not None}
        with pytest.raises(openai.BadRequestError) as refused:
            api.post("/responses", cast_to=dict, body=body)
        assert refused.value.body["param"] == param, refused.value.body


def test_allowed_tools_in_auto_mode_offers_only_those(renderer) -> None:
    seen: list[str] = []

    def script(context) -> str:
        seen.append(json.dumps(context.messages))
        return call("calc", expr="1")

    tools = [*TOOLS, {**TOOLS[0], "name": "other"}]
    with serve(ScriptedPolicy(script, renderer=renderer), renderer) as server:
        api = client(server, "s")
        choice = {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "calc"}],
        }
        r = api.responses.create(model="tiny", input="hi", tools=tools, tool_choice=choice)
        assert [o.type for o in r.output] == ["function_call"]
        none = api.responses.create(model="tiny", input="hi", tools=tools, tool_choice="none")
        assert [o.type for o in none.output] == ["message"]  # not parsed: tools not offered
        prompt = server.session_trajectory("s").segments[0].prompt_ids
        assert '"other"' not in renderer.decode(list(prompt)) and '"calc"' in renderer.decode(
            list(prompt)
        )


def test_forced_tool_choice_is_a_constrained_call_on_the_tiny_model(tiny) -> None:
    """`required`, `allowed_tools` required, a named function and a named custom tool: every reply of the random tiny
    model is that call, produced by the mask (the captured turn is marked `constrained`)."""
    pytest.importorskip("skyrl_sdk.agents.serving.structured", reason="no constrained decoding")
    engine, renderer = tiny
    op = {"type": "string", "enum": ["add", "sub"]}
    tools = [
        {
            "type": "function",
            "name": "pick",
            "parameters": {
                "type": "object",
                "properties": {"op": op},
                "required": ["op"],
                "additionalProperties": False,
            },
        },
        {"type": "custom", "name": "note", "description": "Write a note."},
    ]
    with serve(engine, renderer, session_token_budget=None) as server:
        api = client(server, "forced")
        pick = [{"type": "function", "name": "pick"}]
        for offered, choice, kind in (
            (tools[:1], "required", "function_call"),
            (tools, {"type": "allowed_tools", "mode": "required", "tools": pick}, "function_call"),
            (tools, {"type": "function", "name": "pick"}, "function_call"),
            (tools, {"type": "custom", "name": "note"}, "custom_tool_call"),
        ):
            r = api.responses.create(
                model="tiny",
                input="pick one",
                tools=offered,
                tool_choice=choice,
                max_output_tokens=60 if kind == "function_call" else 400,
                parallel_tool_calls=False,  # one call, then the end of the turn
                extra_body={"seed": 3},
            )
            assert [o.type for o in r.output] == [kind], (choice, r.output)
            if kind == "function_call":
                assert r.output[0].name == "pick"
                assert json.loads(r.output[0].arguments)["op"] in ("add", "sub")
        turns = server.session_trajectory("forced").turns
        assert len(turns) == 4 and all(t.constrained for t in turns)


def test_a_grammar_typed_custom_tool_is_called_under_its_grammar(tiny) -> None:
    """A custom tool with a Lark `format` (as Codex sends `apply_patch`): named, every reply is
    a `custom_tool_call` whose input is a sentence of the grammar, made by the mask; under
    `auto` the turn is constrained too (a lazy grammar: free text until a call opens), and
    any call it makes holds to the grammar."""
    pytest.importorskip("skyrl_sdk.agents.serving.structured", reason="no constrained decoding")
    import re

    engine, renderer = tiny
    tools = [
        {"type": "custom", "name": "apply_patch", "format": GRAMMAR_FORMAT},
        {"type": "function", "name": "calc", "parameters": {"type": "object"}},
    ]
    with serve(engine, renderer, session_token_budget=None) as server:
        api = client(server, "grammar")
        for seed in (1, 2):
            r = api.responses.create(
                model="tiny",
                input="add a file",
                tools=tools,
                tool_choice={"type": "custom", "name": "apply_patch"},
                max_output_tokens=300,
                parallel_tool_calls=False,
                extra_body={"seed": seed},
            )
            assert [o.type for o in r.output] == ["custom_tool_call"], r.output
            assert r.output[0].name == "apply_patch"
            assert re.fullmatch(PATCH_RE, r.output[0].input), r.output[0].input
        auto = api.responses.create(
            model="tiny", input="hi", tools=tools, max_output_tokens=40, extra_body={"seed": 5}
        )
        for item in auto.output:
            if item.type == "custom_tool_call":
                assert re.fullmatch(PATCH_RE, item.input), item.input
        turns = server.session_trajectory("grammar").turns
        assert len(turns) == 3 and all(t.constrained for t in turns)


# -- limits: the same as chat completions --------------------------------------------------------


def test_keys_sessions_and_the_body_cap(renderer) -> None:
    policy = ScriptedPolicy(lambda context: "ok", renderer=renderer)
    with serve(policy, renderer, max_request_bytes=50_000) as server:
        key = server.issue_session_key("mine")
        server.issue_session_key("theirs")
        mine = openai.OpenAI(base_url=server.session_url("mine"), api_key=key, max_retries=0)
        assert mine.responses.create(model="tiny", input="hi").output_text == "ok"
        for url, secret in (
            (server.session_url("theirs"), key),
            (server.base_url, key),
            (server.session_url("mine"), "wrong"),
        ):
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=url, api_key=secret, max_retries=0).responses.create(
                    model="tiny", input="hi"
                )
        with pytest.raises(openai.APIStatusError) as big:
            mine.responses.create(model="tiny", input="x" * 60_000)
        assert big.value.status_code == 413
        with pytest.raises(openai.NotFoundError) as model:
            mine.responses.create(model="gpt-5", input="hi")
        assert model.value.body["code"] == "model_not_found"
        assert server.session_trajectory("mine") is not None


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> Any:
    """The tiny local model with a small batch: a session holds at most 2 rows, queues 2."""
    from skyrl_sdk.agents.engine import LocalEngine
    from skyrl_sdk.agents.engine.fairness import FairnessLimits
    from skyrl_sdk.agents.tiny import tiny_renderer

    limits = FairnessLimits(max_rows=2, max_queued=2)
    engine = LocalEngine.from_pretrained(tiny_dir, name="tiny", max_batch_size=4, fairness=limits)
    return engine, tiny_renderer(tiny_dir)


def test_budget_and_context_on_the_tiny_model(tiny) -> None:
    engine, renderer = tiny
    with serve(engine, renderer, session_token_budget=400) as server:
        api = client(server, "s")
        r = api.responses.create(model="tiny", input="hello", max_output_tokens=5, temperature=0)
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        assert r.usage.output_tokens == 5
        with pytest.raises(openai.BadRequestError) as long:
            api.responses.create(model="tiny", input="hello", max_output_tokens=10**6)
        assert long.value.body["code"] == "context_length_exceeded"
        assert long.value.body["param"] == "max_output_tokens"
        with pytest.raises(openai.RateLimitError) as spent:
            api.responses.create(model="tiny", input="hello", max_output_tokens=1000)
        assert spent.value.body["code"] == "session_token_budget_exceeded"


def test_a_session_gets_its_share_and_a_bounded_queue(tiny) -> None:
    """Six concurrent streamed responses from one session: at most 2 run at once (half of
    the batch) and past 2 waiting the rest are 429 `session_queue_full`; another session is
    served meanwhile."""
    engine, renderer = tiny
    outcomes: list[Any] = []
    with serve(engine, renderer, session_token_budget=None) as server:
        hog, victim = client(server, "hog"), client(server, "victim")

        def one() -> None:
            try:
                events = list(
                    hog.responses.create(
                        model="tiny", input="go", max_output_tokens=64, stream=True
                    )
                )
                outcomes.append(events[-1].type)
            except openai.APIStatusError as e:
                outcomes.append(e.body["code"])

        threads = [threading.Thread(target=one, daemon=True) for _ in range(6)]
        peak = [0]
        done = threading.Event()

        def watch() -> None:  # the hog's rows of the batch, sampled until it is done
            while not done.is_set():
                peak[0] = max(peak[0], engine.running_by_tenant().get("hog", 0))
                time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while not engine.running_by_tenant().get("hog") and time.monotonic() < deadline:
            time.sleep(0.01)
        answer = victim.responses.create(model="tiny", input="hi", max_output_tokens=4)
        served_beside_the_hog = any(t.is_alive() for t in threads)
        for t in threads:
            t.join(120)
        done.set()
        watcher.join(10)
    assert answer.usage.output_tokens >= 1 and served_beside_the_hog
    assert "session_queue_full" in outcomes, outcomes
    assert set(outcomes) <= {"session_queue_full", "response.incomplete", "response.completed"}
    assert 1 <= peak[0] <= 2, f"one session held {peak[0]} rows"


def test_the_header_deadline_spares_a_long_streamed_response(tiny) -> None:
    engine, renderer = tiny
    with serve(engine, renderer, header_timeout_s=0.5) as server:
        body = {"model": "tiny", "input": "go", "max_output_tokens": 200, "stream": True}
        headers = {"Authorization": f"Bearer {MAIN}"}
        started = time.monotonic()
        with httpx.stream(
            "POST", f"{server.base_url}/responses", json=body, headers=headers, timeout=60
        ) as r:
            kinds = [line for line in r.iter_lines() if line.startswith("event: ")]
        took = time.monotonic() - started
        assert kinds[-1] in ("event: response.incomplete", "event: response.completed")
        import socket

        with socket.create_connection((server.host, server.port)) as s:
            s.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\n")  # never finished
            s.settimeout(5)
            t0 = time.monotonic()
            assert s.recv(100) == b""
            assert time.monotonic() - t0 < 2
    assert took > 0.5 or len(kinds) > 10


# -- harnesses in their own venvs / npm prefixes -------------------------------------------------


def _harness(name: str) -> Path:
    found = harness_venv.ready(name)
    if found is None:
        pytest.skip(f"build it with `python -m skyrl_sdk.benchmarks.harness_venv {name}`")
    return found


@pytest.mark.parametrize("stream", [False, True])
def test_openai_agents_default_provider_runs_a_tool(renderer, tmp_path, stream) -> None:
    """openai-agents' default provider (the Responses API) calls the shell tool (scripted as
    non-canonical ids), which writes a file; the session is one segment of the scripted ids."""
    venv = _harness("openai-agents")
    script = [
        non_canonical(renderer, call("shell", command="echo hello world > hello.txt")),
        "Done: hello.txt holds hello world.",
    ]
    with serve(ScriptedPolicy(script, renderer=renderer), renderer) as server:
        key = server.issue_session_key("agents")
        env = {
            "PATH": os.environ["PATH"],
            "OPENAI_BASE_URL": server.session_url("agents"),
            "OPENAI_API_KEY": key,
            "OPENAI_MODEL": "tiny",
            "AGENT_TASK": "Write hello world to hello.txt",
            "AGENT_STREAM": "1" if stream else "0",
        }
        done = subprocess.run(
            [str(venv / "bin" / "python"), str(HARNESSES / "openai_agents_responses_driver.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "final='Done: hello.txt holds hello world.'" in done.stdout
        assert (tmp_path / "hello.txt").read_text() == "hello world\n"
        check_one_segment(server, "agents", renderer, script)


CODEX_CONFIG = """\
model = "tiny"
model_provider = "skyrl"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[model_providers.skyrl]
name = "skyrl"
base_url = "{base_url}"
env_key = "SKYRL_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""
"""Codex CLI's config for a `skyrl serve` session: a custom provider on the Responses API,
its key from the environment, no retries, telemetry, update checks or web search (every key
checked by `--strict-config`)."""


def test_codex_exec_runs_a_tool_that_changes_a_file(renderer, tmp_path) -> None:
    """`codex exec` (0.171.0, Responses API, its own sandbox off, outside a git repository)
    runs a scripted `exec_command` call (non-canonical ids) that writes a file, then answers;
    the session is one segment of exactly the scripted ids."""
    codex = harness_venv.npm_ready("codex")
    if codex is None:
        pytest.skip("build it with `python -m skyrl_sdk.benchmarks.harness_venv codex`")
    script = [
        non_canonical(renderer, call("exec_command", cmd="echo hello world > hello.txt")),
        "Done: hello.txt holds hello world.",
    ]
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    with serve(ScriptedPolicy(script, renderer=renderer), renderer) as server:
        key = server.issue_session_key("codex")
        config = CODEX_CONFIG.format(base_url=server.session_url("codex"))
        (home / ".codex" / "config.toml").write_text(config)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "CODEX_HOME": str(home / ".codex"),
            "SKYRL_API_KEY": key,
        }
        args = ["exec", "--strict-config", "--skip-git-repo-check", "--ephemeral"]
        args += ["--sandbox", "danger-full-access", "Write hello world to hello.txt"]
        done = subprocess.run(
            [str(codex), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert "Done: hello.txt holds hello world." in done.stdout
        assert (work / "hello.txt").read_text() == "hello world\n"
        check_one_segment(server, "codex", renderer, script)


class MaskCheckedPolicy(ScriptedPolicy):
    """A scripted policy that enforces constraints the only way a deterministic one can: each
    scripted id must be allowed by the request's grammar mask, step by step, or the turn is a
    `PolicyError`. It keeps the constraints it was given (what the server built)."""

    supports_constraints = True

    def __init__(self, script, *, renderer) -> None:
        super().__init__(script, renderer=renderer)
        self.constraints: list[Any] = []

    async def generate(self, prompt_token_ids, sampling, *, context=None):
        completion = await super().generate(prompt_token_ids, sampling, context=context)
        if sampling.constraint is not None:
            self.constraints.append(sampling.constraint)
            bad = masked_at(sampling.constraint, self._renderer, completion.token_ids)
            if bad is not None:
                raise PolicyError(f"scripted id {bad} is masked by the request's grammar")
            completion = dataclasses.replace(completion, constrained=True)
        return completion


def masked_at(constraint, renderer, ids: Sequence[int]) -> int | None:
    """The first position of `ids` the constraint's mask forbids (None: all allowed)."""
    from skyrl_sdk.agents.engine.constraints import GrammarMatcher

    matcher = GrammarMatcher(constraint, renderer.tokenizer, renderer.stop_token_ids)
    vocab = len(renderer.tokenizer)
    for k, token in enumerate(ids):
        if not bool(matcher.allowed(vocab)[token]):
            return k
        matcher.advance(token)
    return None


def test_codex_apply_patch_is_written_under_codexs_own_grammar(renderer, tmp_path) -> None:
    """`codex exec -m gpt-5.5` (a model Codex has metadata for) sends `apply_patch` as a
    custom tool with its Lark grammar; the server offers it under `auto` with a lazy grammar
    built from that live definition. The scripted patch call passes the mask token by token,
    Codex applies it (the file appears), and a malformed patch would have been masked."""
    pytest.importorskip("skyrl_sdk.agents.serving.structured", reason="no constrained decoding")
    codex = harness_venv.npm_ready("codex")
    if codex is None:
        pytest.skip("build it with `python -m skyrl_sdk.benchmarks.harness_venv codex`")
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello world\n*** End Patch\n"
    script = [call("apply_patch", input=patch), "Done: hello.txt holds hello world."]
    policy = MaskCheckedPolicy(script, renderer=renderer)
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    config = ServeConfig(model_name="gpt-5.5", api_key=MAIN)
    with start_server(policy, config, renderer=renderer) as server:
        key = server.issue_session_key("codex")
        toml = CODEX_CONFIG.replace('model = "tiny"', 'model = "gpt-5.5"')
        (home / ".codex" / "config.toml").write_text(
            toml.format(base_url=server.session_url("codex"))
        )
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "CODEX_HOME": str(home / ".codex"),
            "SKYRL_API_KEY": key,
        }
        args = ["exec", "--strict-config", "--skip-git-repo-check", "--ephemeral"]
        args += ["--sandbox", "danger-full-access", "Write hello world to hello.txt"]
        done = subprocess.run(
            [str(codex), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert (work / "hello.txt").read_text() == "hello world\n"
        assert "Done: hello.txt holds hello world." in done.stdout
        assert len(policy.constraints) == 2  # both turns under the lazy tool-call grammar
        live = policy.constraints[0]
        assert "G_UPDATE_HUNK" in live.source  # Codex's definition, rewritten for JSON
        update = '*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    x = 1\n+    x = "\\\\"\n*** End Patch\n'
        assert (
            masked_at(live, renderer, renderer.encode("Ok.\n" + call("apply_patch", input=update)))
            is None
        )
        broken = call("apply_patch", input="*** Begin Patch\nhello\n*** End Patch\n")
        assert masked_at(live, renderer, renderer.encode(broken)) is not None
        assert masked_at(live, renderer, renderer.encode(call("nope", x=1))) is not None
        check_one_segment(server, "codex", renderer, script)
        assert all(t.constrained for t in server.session_trajectory("codex").turns)
