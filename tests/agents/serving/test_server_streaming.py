"""Streamed text equals the non-streamed reply, whatever the reply and however it is cut."""

from __future__ import annotations

import random

import pytest

from skyrl_sdk.agents.policy import Completion, FinishReason
from skyrl_sdk.agents.serving.generation import TextDeltas, reply
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat

CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "6*7"}}\n</tool_call>'
REPLIES = [
    "plain text",
    "  leading spaces then text",
    "Let me see.\n" + CALL,
    CALL + "\nafter the call",
    "before " + CALL + " between " + CALL + " after",
    "text with <tool_ but no call",
    "ends with a partial marker <tool_c",
    '{"name": "calc", "parameters": {"expr": "1"}}',
    '{"not": "a call"}',
    "<|python_tag|>" + '{"name": "calc", "parameters": {}}',
    'Sure. [TOOL_CALLS] [{"name": "calc", "arguments": {}}]',
    "broken <tool_call>{nope</tool_call> tail",
    "stop here STOP and not this",
    "héllo wörld ✓ 数字",
]


@pytest.fixture(scope="module")
def renderer():
    from skyrl_sdk.agents.tiny import tiny_renderer

    return tiny_renderer()


@pytest.mark.parametrize("tools", [False, True])
@pytest.mark.parametrize("text", REPLIES)
def test_deltas_add_up_to_the_reply(renderer, text, tools) -> None:
    ids = [*renderer.encode(text), renderer.end_of_turn_id]
    completion = Completion(tuple(ids), None, renderer.content_text(ids), FinishReason.STOP)
    stops = ("STOP",)
    final = reply(completion, stops, ToolOutputFormat.AUTO if tools else None)
    rng = random.Random(len(text))
    for _ in range(5):
        deltas = TextDeltas(renderer, stops, tools=tools)
        streamed, at = "", 0
        while at < len(ids):
            step = rng.randint(1, 3)
            streamed += deltas.push(ids[at : at + step])
            at += step
        streamed += deltas.finish(final.content or "")
        assert streamed == (final.content or "")


FRAGMENTS = ["word ", " ", "\n", "<", "<tool", "_call>", CALL, "[TOOL_CALLS]", "{", "}", "ST", "OP"]
FRAGMENTS += ["<|python_tag|>", '{"name": "calc", "parameters": {}}', "é", "数", "Let me see. "]


@pytest.mark.parametrize("seed", range(40))
def test_random_replies_stream_to_the_same_content(renderer, seed) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 30)))
    ids = [*renderer.encode(text), renderer.end_of_turn_id]
    completion = Completion(tuple(ids), None, renderer.content_text(ids), FinishReason.STOP)
    for tools in (False, True):
        final = reply(completion, ("STOP",), ToolOutputFormat.AUTO if tools else None)
        deltas = TextDeltas(renderer, ("STOP",), tools=tools)
        streamed, at = "", 0
        while at < len(ids):
            step = rng.randint(1, 4)
            streamed += deltas.push(ids[at : at + step])
            at += step
        streamed += deltas.finish(final.content or "")
        assert streamed == (final.content or ""), (text, tools)
