"""A streamed Messages answer: Anthropic's server-sent events, in Anthropic's order.

    message_start
    content_block_start (index 0) · ping · content_block_delta (text_delta)* · content_block_stop
    content_block_start (tool_use) · content_block_delta (input_json_delta) · content_block_stop
    ...
    message_delta (stop_reason, stop_sequence, usage) · message_stop

Each event is `event: NAME` plus `data: JSON` whose `type` is NAME. Text is sent as the
model writes it, as much as `generation.TextDeltas` says cannot change (a possible stop
sequence or tool-call marker is held back); a tool call's input is sent whole in one
`input_json_delta` once the reply is parsed. A failure mid-stream is an `error` event in
Anthropic's error shape (the SDK raises it), never a silent hang.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from skyrl_sdk.agents.policy import PolicyError, TokenChunk
from skyrl_sdk.agents.serving.generation import TextDeltas, reply
from skyrl_sdk.agents.serving.messages_protocol import (
    ContentBlock,
    api_error_body,
    content_blocks,
    error_body,
    message_body,
    stop_of,
    usage,
)
from skyrl_sdk.agents.serving.protocol import ApiError
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import PrimedStream

log = logging.getLogger(__name__)


def _sse(payload: Mapping[str, object]) -> bytes:
    """One event, named by its payload's `type`."""
    data = json.dumps(payload, ensure_ascii=False)
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


class _Blocks:
    """Numbers content blocks and sends the one `ping`, after the first block starts."""

    def __init__(self) -> None:
        self.index = 0
        self.text_open = False
        self.pinged = False

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        out = [_sse({"type": "content_block_start", "index": self.index, "content_block": block})]
        if not self.pinged:
            self.pinged = True
            out.append(_sse({"type": "ping"}))
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _sse({"type": "content_block_delta", "index": self.index, "delta": delta})

    def _stop(self) -> bytes:
        out = _sse({"type": "content_block_stop", "index": self.index})
        self.index += 1
        return out

    def text(self, text: str) -> list[bytes]:
        """Events adding `text` to the (opened if need be) text block."""
        out = [] if self.text_open else self._start({"type": "text", "text": ""})
        self.text_open = True
        out.append(self._delta({"type": "text_delta", "text": text}))
        return out

    def close_text(self) -> list[bytes]:
        """Close the text block, if one is open."""
        if not self.text_open:
            return []
        self.text_open = False
        return [self._stop()]

    def tool_use(self, block: ContentBlock) -> list[bytes]:
        """A whole `tool_use` block: start (empty input), its input as JSON, stop."""
        out = self._start({**block, "input": {}})
        partial = json.dumps(block.get("input", {}), ensure_ascii=False)
        out.append(self._delta({"type": "input_json_delta", "partial_json": partial}))
        out.append(self._stop())
        return out

    def ping(self) -> list[bytes]:
        """The ping, if no block started (an empty reply)."""
        if self.pinged:
            return []
        self.pinged = True
        return [_sse({"type": "ping"})]


async def message_events(
    server: Server, plan: Plan, first: PrimedStream, message_id: str
) -> AsyncIterator[bytes]:
    """The streamed answer (see the module docstring); the turn is captured before
    `message_delta` is sent."""
    try:
        async for data in _events(server, plan, first, message_id):
            yield data
    except ApiError as e:
        yield _sse(api_error_body(e))
    except PolicyError as e:
        yield _sse(error_body(500, str(e)))
    except asyncio.CancelledError:
        raise
    except Exception as e:  # never a silent hang: the client learns the stream failed
        log.exception("streaming a message failed")
        yield _sse(error_body(500, f"generation failed: {type(e).__name__}"))


async def _events(
    server: Server, plan: Plan, stream: PrimedStream, message_id: str
) -> AsyncIterator[bytes]:
    start = message_body(
        message_id, server.config.model_name, [], (None, None), (len(plan.prompt), 0)
    )
    yield _sse({"type": "message_start", "message": start})
    blocks = _Blocks()
    deltas = TextDeltas(server.renderer, plan.stops, tools=plan.tool_format is not None)
    completion = None
    async for item in stream:
        if isinstance(item, TokenChunk):
            text = deltas.push(item.token_ids)
            if text:
                for data in blocks.text(text):
                    yield data
        else:
            completion = item
    assert completion is not None
    r = reply(completion, plan.stops, plan.tool_format)
    await server.capture(plan, 0, r, stream.elapsed())
    rest = deltas.finish(r.content or "")
    out = blocks.text(rest) if rest else []
    out += blocks.close_text()
    for block in content_blocks(r):
        if block["type"] == "tool_use":
            out += blocks.tool_use(block)
    out += blocks.ping()
    stop_reason, stop_sequence = stop_of(r, plan.stops)
    delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    tokens = usage(len(plan.prompt), len(completion.token_ids))
    out.append(_sse({"type": "message_delta", "delta": delta, "usage": tokens}))
    out.append(_sse({"type": "message_stop"}))
    for data in out:
        yield data
