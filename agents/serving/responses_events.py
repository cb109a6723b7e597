"""A streamed Responses answer: the typed server-sent events the openai SDK and Codex parse.

Order (each event carries `type` and an increasing `sequence_number`, and is sent with an
`event:` line naming its type, as OpenAI sends them): `response.created`,
`response.in_progress`; for the reply's text, once its first safe piece is known (see
`generation.TextDeltas`), `response.output_item.added` (a `message`),
`response.content_part.added` (an `output_text` part), `response.output_text.delta`s, then
`response.output_text.done`, `response.content_part.done`, `response.output_item.done`; per
tool call `response.output_item.added`, `response.function_call_arguments.delta` / `.done`
(`response.custom_tool_call_input.delta` / `.done` for a custom tool),
`response.output_item.done`; last `response.completed` (or `response.incomplete` when the
reply hit `max_output_tokens`) holding the whole response with `usage`. A failure after the
stream began is `response.failed` with the error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from skyrl_sdk.agents.policy import PolicyError, TokenChunk
from skyrl_sdk.agents.serving.generation import Reply, TextDeltas, reply
from skyrl_sdk.agents.serving.protocol import ApiError
from skyrl_sdk.agents.serving.responses_protocol import (
    OutputItem,
    ResponseHead,
    ToolSet,
    message_item,
    output_items,
    response_usage,
)
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import PrimedStream

log = logging.getLogger(__name__)

Finish = Callable[[Reply, list[OutputItem]], Awaitable[None]]
"""Called once the reply is known, before the last event: captures it, keeps its items."""


class _Events:
    """Numbers and frames the events of one stream."""

    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        data = json.dumps(payload, ensure_ascii=False)
        return f"event: {kind}\ndata: {data}\n\n".encode()


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_events(emit: _Events, index: int, item: OutputItem) -> list[bytes]:
    """One call's events, its arguments (or custom input) in one delta."""
    custom = item["type"] == "custom_tool_call"
    field, kind = (
        ("input", "custom_tool_call_input") if custom else ("arguments", "function_call_arguments")
    )
    where = {"item_id": item["id"], "output_index": index}
    done: dict[str, Any] = {field: item[field]}
    if not custom:
        done["name"] = item["name"]
    return [
        emit(
            "response.output_item.added",
            output_index=index,
            item={**item, field: "", "status": "in_progress"},
        ),
        emit(f"response.{kind}.delta", **where, delta=item[field]),
        emit(f"response.{kind}.done", **where, **done),
        emit("response.output_item.done", output_index=index, item=item),
    ]


class _Message:
    """The reply's text item, opened at its first delta."""

    def __init__(self, emit: _Events):
        self.emit = emit
        self.id: str | None = None

    def open(self, item_id: str) -> list[bytes]:
        self.id = item_id
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        return [
            self.emit(
                "response.output_item.added",
                output_index=0,
                item={**message_item(item_id, "", "in_progress"), "content": []},
            ),
            self.emit("response.content_part.added", **where, part=_part("")),
        ]

    def delta(self, text: str) -> bytes:
        where = {"item_id": self.id, "output_index": 0, "content_index": 0}
        return self.emit("response.output_text.delta", **where, delta=text, logprobs=[])

    def close(self, item: OutputItem) -> list[bytes]:
        text = item["content"][0]["text"]
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        return [
            self.emit("response.output_text.done", **where, text=text, logprobs=[]),
            self.emit("response.content_part.done", **where, part=_part(text)),
            self.emit("response.output_item.done", output_index=0, item=item),
        ]


async def response_events(
    server: Server,
    plan: Plan,
    head: ResponseHead,
    tools: ToolSet,
    stream: PrimedStream,
    finish: Finish,
) -> AsyncIterator[bytes]:
    """The whole event stream of one streamed response."""
    emit = _Events()
    yield emit("response.created", response=head.body("in_progress"))
    yield emit("response.in_progress", response=head.body("in_progress"))
    try:
        async for data in _output(server, plan, head, tools, stream, finish, emit):
            yield data
    except asyncio.CancelledError:
        raise
    except Exception as e:  # never a silent hang: the client learns the stream failed
        if isinstance(e, ApiError):
            error = {"code": e.code or e.kind, "message": e.message}
        elif isinstance(e, PolicyError):
            error = {"code": "policy_error", "message": str(e)}
        else:
            log.exception("streaming a response failed")
            error = {"code": "server_error", "message": f"generation failed: {type(e).__name__}"}
        yield emit("response.failed", response={**head.body("failed"), "error": error})


async def _output(
    server: Server,
    plan: Plan,
    head: ResponseHead,
    tools: ToolSet,
    stream: PrimedStream,
    finish: Finish,
    emit: _Events,
) -> AsyncIterator[bytes]:
    deltas = TextDeltas(server.renderer, plan.stops, tools=plan.tool_format is not None)
    message = _Message(emit)
    completion = None
    async for chunk in stream:
        if not isinstance(chunk, TokenChunk):
            completion = chunk
            continue
        text = deltas.push(chunk.token_ids)
        if text:
            if message.id is None:
                for data in message.open(head.id.replace("resp_", "msg_", 1)):
                    yield data
            yield message.delta(text)
    assert completion is not None
    r = reply(completion, plan.stops, plan.tool_format)
    items = output_items(r, tools)
    rest = deltas.finish(r.content or "")
    if message.id is not None:
        if items[0]["type"] != "message":  # cannot happen (TextDeltas); stay consistent
            items.insert(0, message_item(message.id, "".join(deltas.sent)))
        items[0]["id"] = message.id
    await finish(r, items)
    if items[0]["type"] == "message":
        if message.id is None:
            for data in message.open(items[0]["id"]):
                yield data
        if rest:
            yield message.delta(rest)
        for data in message.close(items[0]):
            yield data
    for index, item in enumerate(items):
        if item["type"] != "message":
            for data in _call_events(emit, index, item):
                yield data
    status = "incomplete" if r.finish_reason == "length" else "completed"
    usage = response_usage(len(plan.prompt), len(completion.token_ids))
    yield emit(f"response.{status}", response=head.body(status, items, usage))
