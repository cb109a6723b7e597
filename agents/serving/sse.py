"""Server-sent events: the streamed answer, cancelled the moment the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response

DONE = b"data: [DONE]\n\n"
"""The last event of every OpenAI stream."""


def json_response(payload: dict[str, Any]) -> Response:
    """A JSON response, serialized once (no response-model validation on the hot path)."""
    return Response(json.dumps(payload, ensure_ascii=False).encode(), media_type="application/json")


def event(payload: dict[str, Any]) -> bytes:
    """One `data:` event."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


class EventStreamResponse(Response):
    """An ASGI response that sends `events` as they come and stops generating them when the
    client disconnects: a watcher waits for `http.disconnect` alongside the sender, and the
    first to finish cancels the other, then the event iterator is closed (which closes the
    policy's token stream, which cancels the generation)."""

    def __init__(self, events: AsyncIterator[bytes]):
        self.events = events
        self.status_code = 200
        self.background = None
        self.init_headers({})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]

        async def pump() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                # Let the loop run between chunks: a policy that yields tokens without
                # awaiting must not starve the disconnect watcher (or other requests).
                await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        sender = asyncio.ensure_future(pump())
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({sender, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, watcher):
                task.cancel()
            for task in (sender, watcher):
                with contextlib.suppress(asyncio.CancelledError, OSError, Exception):
                    await task
            aclose = getattr(self.events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
