"""`Request`: one generate call, from the queue to a row of the running batch to its answer.

The front end creates it (`LocalEngine.generate` / `generate_stream`), the scheduler admits it,
the runner appends the tokens it samples, and `emit`/`resolve` hand tokens and the completion
back to the caller's event loop (the worker thread never touches the loop directly).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.engine.options import DEFAULT_OPTIONS, RequestOptions
from skyrl_sdk.agents.policy import Completion, FinishReason, SamplingParams, TokenChunk

if TYPE_CHECKING:
    from skyrl_sdk.agents.engine.constraints import GrammarMatcher


@dataclass(eq=False)
class Request:
    """One generate call: waiting in the queue, then a row of the running batch."""

    prompt: list[int]
    """The prompt's token ids."""
    sampling: SamplingParams
    """How to sample it."""
    loop: asyncio.AbstractEventLoop | None
    """The caller's event loop (where its future or stream lives; None: a synchronous
    caller, answered through `on_done`)."""
    future: asyncio.Future[Completion] | None = None
    """Where `generate` waits for the completion."""
    chunks: asyncio.Queue[Any] | None = None
    """Where `generate_stream` reads tokens, then the completion (or an exception)."""
    ids: list[int] = field(default_factory=list)
    """Sampled ids so far."""
    logprobs: list[float] = field(default_factory=list)
    """Their logprobs."""
    versions: list[int] = field(default_factory=list)
    """The weights version that sampled each."""
    top: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    """Each token's most likely alternatives (when `sampling.top_logprobs`)."""
    generator: Any = None
    """Its own `torch.Generator` when `sampling.seed` is set (tokens independent of batching)."""
    finish: FinishReason | None = None
    """Why it ended (None: running or waiting)."""
    cancelled: bool = False
    """Set by the caller's thread when it gives up; the worker drops the row at its next step."""
    kv_version: int = 0
    """Weights version when its keys and values started (admission)."""
    skipped: int = 0
    """Decoding steps it sat out for the fair share of a step (`fairness.rows_to_step`)."""
    tenant: str | None = None
    """Whose request it is (the context's `episode_id`; None: an untenanted caller), for
    the fair share of the batch (`fairness`)."""
    grammar: GrammarMatcher | None = None
    """The matcher of `sampling.constraint` (None: unconstrained), made when it is submitted."""

    options: RequestOptions = DEFAULT_OPTIONS
    """The engine-level options (`options`: logprob mode, prompt logprobs, stop suffixes)."""
    prompt_logprobs: list[float | None] | None = None
    """Each prompt token's logprob (None for the first), once prefilled, when
    `options.prompt_logprobs`."""
    on_done: Callable[[Request, Completion | BaseException], None] | None = None
    """A synchronous caller's sink (`sync.SyncEngine`): called on the engine's thread with
    the completion or the error that ended the request, instead of going through `loop`."""

    @property
    def done(self) -> bool:
        """Finished or cancelled."""
        return self.finish is not None or self.cancelled

    def _call(self, fn: Any, *args: Any) -> None:
        if self.loop is None:
            return
        # RuntimeError: the caller's event loop is closed, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, *args)

    def emit(self, token: int, logprob: float) -> None:
        """Hand one sampled token to a streaming caller."""
        if self.chunks is not None:
            self._call(self.chunks.put_nowait, TokenChunk((token,), (logprob,)))

    def resolve(self, value: Completion | BaseException) -> None:
        """Hand the caller its completion (or the error that ended it)."""
        if self.on_done is not None:
            self.on_done(self, value)
            return
        if self.chunks is not None:
            self._call(self.chunks.put_nowait, value)
            return
        future = self.future

        def set_it() -> None:
            if future is None or future.done():
                return  # the caller gave up (cancelled, timed out)
            if isinstance(value, BaseException):
                future.set_exception(value)
            else:
                future.set_result(value)

        self._call(set_it)

    def finish_reason(self, tokenizer: Any) -> FinishReason | None:
        """Why it ends after its latest token (a stop id or string, `max_tokens`), or None."""
        if self.ids[-1] in self.sampling.stop_token_ids:
            return FinishReason.STOP
        if self.grammar is not None and self.grammar.finished:  # its end token was sampled
            return FinishReason.STOP
        if self.sampling.stop:
            # A stop string spans at most len(utf-8 bytes) tokens: decode only that tail.
            window = max(len(s.encode()) for s in self.sampling.stop) + 1
            tail = tokenizer.decode(self.ids[-window:], skip_special_tokens=False)
            if any(s in tail for s in self.sampling.stop):
                return FinishReason.STOP
        if self.options.stop_suffixes:  # the whole sample's text: Tinker's rule, kept exact
            text = tokenizer.decode(self.ids)
            if any(text.endswith(s) for s in self.options.stop_suffixes):
                return FinishReason.STOP
        if len(self.ids) >= self.sampling.max_tokens:
            return FinishReason.LENGTH
        return None

    def completion(self, renderer: ChatRenderer) -> Completion:
        """The `Completion` of what it sampled."""
        versions = tuple(self.versions)
        return Completion(
            token_ids=tuple(self.ids),
            logprobs=tuple(self.logprobs),
            text=renderer.content_text(self.ids),
            finish_reason=self.finish or FinishReason.ABORT,
            policy_version=versions[-1],
            token_policy_versions=versions if len(set(versions)) > 1 else (),
            top_logprobs=tuple(self.top) if self.sampling.top_logprobs else None,
            constrained=self.grammar is not None,
        )
