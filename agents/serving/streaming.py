"""Streamed answers: a choice's primed token stream, several choices merged, failures sent as
error events."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from skyrl_sdk.agents.policy import (
    Completion,
    PolicyError,
    TokenChunk,
)
from skyrl_sdk.agents.serving.generation import token_stream
from skyrl_sdk.agents.serving.protocol import ApiError
from skyrl_sdk.agents.serving.sse import event
from skyrl_sdk.agents.serving.state import Plan, Server

log = logging.getLogger(__name__)


class PrimedStream:
    """A choice's token stream whose first item is fetched before the response starts, so
    that a policy failing at once (a script with no reply left) is a plain HTTP error."""

    def __init__(self, server: Server, plan: Plan, index: int):
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._inner = token_stream(
            server.policy, plan.prompt, plan.sampling_for(index), server.context(plan)
        )
        self._first: TokenChunk | Completion | None = None
        self._ticket = plan.ticket
        self._index = index

    async def prime(self) -> None:
        self._first = await self._inner.__anext__()

    def elapsed(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    async def __aiter__(self) -> AsyncIterator[TokenChunk | Completion]:
        try:
            if self._first is not None:
                first, self._first = self._first, None
                if isinstance(first, TokenChunk):
                    self._ticket.generated += len(first.token_ids)
                elif self._index == 0:
                    self._ticket.reply = first.token_ids
                yield first
                if isinstance(first, Completion):
                    return
            async for item in self._inner:
                if isinstance(item, Completion):
                    self.finished = time.perf_counter()
                    if self._index == 0:
                        self._ticket.reply = item.token_ids
                else:
                    self._ticket.generated += len(item.token_ids)  # the session's budget
                yield item
        finally:
            await self._inner.aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()


async def guarded(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`events`, with a failure mid-stream sent as an OpenAI error event (the SDK raises it)."""
    try:
        async for data in events:
            yield data
    except ApiError as e:
        yield event(e.body())
    except PolicyError as e:
        yield event(ApiError(500, str(e), code="policy_error").body())
    except asyncio.CancelledError:
        raise
    except Exception as e:  # never a silent hang: the client learns the stream failed
        log.exception("streaming failed")
        yield event(ApiError(500, f"generation failed: {type(e).__name__}").body())


async def merge(streams: list[AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
    """Interleave several choices' events as they come (one stream: passed through)."""
    if len(streams) == 1:
        async for data in streams[0]:
            yield data
        return
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()

    async def drain(stream: AsyncIterator[bytes]) -> None:
        try:
            async for data in stream:
                await queue.put(data)
            await queue.put(None)
        except BaseException as e:
            await queue.put(e)

    tasks = [asyncio.ensure_future(drain(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def start_stream(server: Server, plan: Plan) -> PrimedStream:
    """Choice 0's stream with its first item fetched (errors before any byte is sent are HTTP errors)."""
    server.check_admitted(plan)
    first = PrimedStream(server, plan, 0)
    try:
        await first.prime()
    except BaseException:
        await first.aclose()
        raise
    return first
