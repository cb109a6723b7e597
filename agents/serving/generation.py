"""Calling the policy for a request: tokens as they come, the reply they make, cancellation.

`token_stream` uses `StreamingPolicy.generate_stream` when the policy has it and otherwise
generates the whole completion and hands its tokens out one by one (same tokens, later).
`reply` turns a finished `Completion` into the reply a client sees (stop string cut, tool
calls parsed); a streamed answer is built from the same function on the same completion, so
streamed and non-streamed text are equal by construction. `TextDeltas` decides how much of
the text sampled so far is safe to send early.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from skyrl_sdk.agents.policy import (
    Completion,
    GenerationContext,
    Policy,
    SamplingParams,
    TokenChunk,
)
from skyrl_sdk.agents.serving.tool_output import MARKERS, ToolOutput, ToolOutputFormat, parse

if TYPE_CHECKING:
    from skyrl_sdk.agents.chat import ChatRenderer

T = TypeVar("T")


async def token_stream(
    policy: Policy,
    prompt: Sequence[int],
    sampling: SamplingParams,
    context: GenerationContext | None,
) -> AsyncIterator[TokenChunk | Completion]:
    """`TokenChunk`s, then the `Completion`; closing it early cancels the generation."""
    stream = getattr(policy, "generate_stream", None)
    if stream is None:
        completion = await policy.generate(prompt, sampling, context=context)
        for k, token in enumerate(completion.token_ids):
            lp = None if completion.logprobs is None else (completion.logprobs[k],)
            yield TokenChunk((token,), lp)
        yield completion
        return
    inner = stream(prompt, sampling, context=context)
    try:
        async for item in inner:
            yield item
    finally:
        await inner.aclose()


class ClientDisconnected(Exception):
    """The client went away before its answer was ready; the generation was cancelled."""


async def until_disconnect(
    receive: Callable[[], Awaitable[dict[str, Any]]], work: Awaitable[T]
) -> T:
    """Await `work`, cancelling it if the client disconnects first (`ClientDisconnected`)."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise ClientDisconnected("the client disconnected")
    return task.result()


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """`text` up to (not including) the first stop string, as OpenAI returns it."""
    cut = len(text)
    for s in stops:
        at = text.find(s)
        if 0 <= at < cut:
            cut = at
    return text[:cut]


@dataclass(frozen=True)
class Reply:
    """What a client sees of one completion."""

    completion: Completion
    """The policy's completion (sampled ids, logprobs)."""
    text: str
    """The reply text, stop string cut."""
    output: ToolOutput
    """`text` split into content and tool calls (no calls when tools were not offered)."""

    @property
    def finish_reason(self) -> str:
        """OpenAI's `finish_reason`."""
        if self.output.calls:
            return "tool_calls"
        return "length" if self.completion.finish_reason.value == "length" else "stop"

    @property
    def content(self) -> str | None:
        """The message `content` (None for a reply that is only tool calls)."""
        if self.output.calls:
            return self.output.content or None
        return self.output.content


def reply(
    completion: Completion,
    stops: Sequence[str],
    tool_format: ToolOutputFormat | None,
) -> Reply:
    """The client's view of `completion` (`tool_format` None: tools not offered)."""
    text = cut_at_stop(completion.text, stops)
    output = parse(text, tool_format) if tool_format is not None else ToolOutput(text)
    return Reply(completion, text, output)


class TextDeltas:
    """Incremental text of a streamed completion, in time linear in its length.

    Text is sent only when it cannot change: a trailing incomplete UTF-8 character and the
    last `len(longest stop) - 1` characters (they might begin a stop string, which is not
    returned) are held back, and nothing after a stop string is sent. With tools offered
    (`tools=True`), text is also held from where a tool call might begin (a call marker, or
    a part of one at the end), trailing whitespace is held (a reply that turns out to call a
    tool has its content stripped), and a reply that starts with whitespace or `{` (Llama 3's
    JSON call) is held whole; the rest is sent at the end. So the streamed content always
    adds up to `Reply.content`.
    """

    def __init__(self, renderer: ChatRenderer | None, stops: Sequence[str], tools: bool):
        self.renderer = renderer
        self.stops = tuple(stops)
        self.tools = tools
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.longest_marker = max(len(m) for m in MARKERS)
        self.ids: list[int] = []
        self.sent: list[str] = []
        """What was sent, in pieces."""
        self.pending = ""
        """Decoded text not sent yet."""
        self.closed = False
        """Nothing more will be sent before `finish` (a stop string or a tool call began)."""
        self.started = False
        """Whether the reply's first character is known."""
        self.window = 0
        """Where the last decode began: one chunk of context before `read`, so a tokenizer
        whose pieces depend on what precedes them (SentencePiece's leading space) decodes
        the new ids as it would in place."""
        self.read = 0
        """How many ids are decoded into `sent` + `pending`."""

    def push(self, token_ids: Sequence[int]) -> str:
        """Take new ids; the text that may be sent now ('' if none)."""
        self.ids.extend(token_ids)
        if self.renderer is None or self.closed:
            return ""
        new = self._decode_new()
        if not new:
            return ""
        if not self.started:
            self.started = True
            if self.tools and (new[0].isspace() or new[0] == "{"):
                self.closed = True  # content depends on what the whole reply turns out to be
                return ""
        self.pending += new
        # A stop string or a marker can only newly appear across what earlier pushes scanned
        # (all of the old pending text for stops; all but its held-back end for markers).
        scan = max(0, len(self.pending) - len(new) - self.hold - self.longest_marker)
        ready = self.pending
        stop = _first(self.pending, self.stops, scan)
        if stop is not None:
            ready, self.closed = self.pending[:stop], True
        elif self.hold:
            ready = ready[: max(0, len(ready) - self.hold)]
        if self.tools:
            marker = _first(ready, MARKERS, scan)
            if marker is not None:
                ready, self.closed = ready[:marker], True
            ready = _before_partial_marker(ready).rstrip()
        if not ready:
            return ""
        self.pending = self.pending[len(ready) :]
        self.sent.append(ready)
        return ready

    def _decode_new(self) -> str:
        """The text of the ids not decoded yet ('' while a character is incomplete)."""
        assert self.renderer is not None
        ids = self.ids
        if ids and ids[-1] in self.renderer.stop_token_ids:
            ids = ids[:-1]  # the end-of-turn token is not text (as in `content_text`)
        if len(ids) == self.read:
            return ""
        window = self.renderer.decode(ids[self.window :])
        if window.endswith("\ufffd"):
            return ""  # wait for the character's other bytes
        before = self.renderer.decode(ids[self.window : self.read])
        self.window, self.read = self.read, len(ids)
        if not window.startswith(before):
            self.closed = True  # the new ids changed how earlier ones read: send at the end
            return ""
        return window[len(before) :]

    def finish(self, content: str) -> str:
        """The rest of the final `content` (what was not sent yet)."""
        sent = "".join(self.sent)
        if content.startswith(sent):
            self.sent = [content]
            return content[len(sent) :]
        return ""  # cannot happen with a prefix-stable decoder; never resend text


def _first(text: str, needles: Sequence[str], start: int) -> int | None:
    """Where the first of `needles` occurs in `text` at or after `start` (None: nowhere)."""
    found = [at for n in needles if (at := text.find(n, start)) >= 0]
    return min(found) if found else None


def _before_partial_marker(text: str) -> str:
    """`text` without an ending that could be the beginning of a call marker."""
    for marker in MARKERS:
        for k in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:k]):
                text = text[: len(text) - k]
                break
    return text
