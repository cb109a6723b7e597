"""`SyncEngine`: the engine driven from its caller's own thread, for batch-oriented servers.

`LocalEngine` owns a worker thread and answers coroutines. A server that already runs all
its torch work on one thread of its own (the Tinker server: training and sampling in
submission order, `trainer.tinker.worker`) wants the same engine without a second torch
thread: it submits requests, then calls `run`, which steps the running batch on the calling
thread until nothing is queued or running. Between two steps `run` calls the caller back
(`between`), which may submit more requests (they join the running batch at the next step)
or cancel some (their rows leave at the next step). Each request is answered through its
`on_done` sink, on this thread, the moment it ends.

The parts are `LocalEngine`'s: the continuous scheduler (mixed steps where the model allows
them), the runner, the running batch's KV slots and the prefix cache; requests are all
untenanted (the caller schedules its own clients). A request's engine-level options
(`options.RequestOptions`: logprob mode, prompt logprobs, stop suffixes) ride on its `Request`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.engine.core import build_core
from skyrl_sdk.agents.engine.fairness import FairnessLimits
from skyrl_sdk.agents.engine.options import DEFAULT_OPTIONS, RequestOptions
from skyrl_sdk.agents.engine.packed_step import supports_mixed_steps
from skyrl_sdk.agents.engine.prefix_cache import PrefixCache
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.engine.runner import prompt_logprobs
from skyrl_sdk.agents.engine.scheduler import Scheduling
from skyrl_sdk.agents.engine.split_linear import split_small_linears, use_split_linears
from skyrl_sdk.agents.engine.stats import EngineStats
from skyrl_sdk.agents.policy import Completion, PolicyError, SamplingParams

DEFAULT_SYNC_PREFIX_CACHE_BYTES = 128 << 20
"""The prefix cache budget of a `SyncEngine`: small, since a server may hold many (the
Tinker server has one per frozen snapshot of a training run)."""

PLAIN_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
"""The chat template of a tokenizer that has none: a synchronous caller reads token ids, and
the renderer only decodes a completion's text."""

OnDone = Callable[[Request, "Completion | BaseException"], None]
"""Receives a request and its completion (or the error that ended it)."""


class SyncEngine:
    """A transformers causal LM's continuous batching, stepped by the caller's thread (see
    the module docstring). Not thread-safe: one thread submits and runs."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 64,
        name: str = "sync",
        prefix_cache_bytes: int = DEFAULT_SYNC_PREFIX_CACHE_BYTES,
        mixed_steps: bool = True,
    ):
        self.model = model.eval()
        self.name = name
        self.device = next(model.parameters()).device
        if self.device.type == "cpu":
            split_small_linears(model)  # only in `run` (its thread enables them meanwhile)
        template = None if getattr(tokenizer, "chat_template", None) else PLAIN_TEMPLATE
        renderer = ChatRenderer(tokenizer, template)
        self.tokenizer = tokenizer
        self.prefix_cache = PrefixCache(prefix_cache_bytes)
        """Keys and values of earlier prompts and sequences (a group's repeated prompt is
        prefilled once)."""
        self._core = build_core(
            name,
            model,
            renderer,
            self.prefix_cache,
            scheduling=Scheduling.CONTINUOUS,
            fairness=FairnessLimits(max_rows=None, max_queued=None, step_rows=None),
            max_batch_size=max_batch_size,
            mixed_steps=mixed_steps and supports_mixed_steps(model),
            policy_version=0,
            num_threads=None,
        )
        self.counters = self._core.counters
        self._scheduler = self._core.scheduler
        self._scheduler.idle_wait_s = 0.0  # `run` returns once nothing is queued or running

    @property
    def max_batch_size(self) -> int:
        """Most rows of the running batch (more requests wait in the queue)."""
        return self._scheduler.max_batch_size

    @max_batch_size.setter
    def max_batch_size(self, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {rows}")
        self._scheduler.max_batch_size = rows

    @property
    def vocab_size(self) -> int:
        """Rows of the model's input embedding (valid prompt ids are below it)."""
        return int(self.model.get_input_embeddings().num_embeddings)

    def stats(self) -> EngineStats:
        """A snapshot of the counters."""
        slots = self._core.batch.slots
        live = slots.copies if slots is not None else 0
        return self.counters.snapshot(live, self.prefix_cache.stats())

    def submit(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        on_done: OnDone,
        *,
        options: RequestOptions = DEFAULT_OPTIONS,
    ) -> Request:
        """Queue a request; it starts at the next step of `run` (set its `cancelled` to drop
        it). `on_done(request, completion or error)` is called when it ends."""
        if not prompt:
            raise PolicyError("the prompt is empty")
        if sampling.max_tokens < 1:
            raise PolicyError(f"max_tokens must be >= 1, got {sampling.max_tokens}")
        request = Request(list(prompt), sampling, None, options=options, on_done=on_done)
        self._core.queue.put(None, request)
        return request

    def score(self, prompt: Sequence[int]) -> list[float | None]:
        """Each prompt token's logprob (None for the first), with nothing sampled."""
        import torch

        ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = self.model(input_ids=ids, use_cache=False)
        self.counters.computed += len(prompt)
        return prompt_logprobs(out.logits[0], prompt)

    def run(self, between: Callable[[], None] | None = None) -> None:
        """Step until nothing is queued or running, calling `between()` before each step
        (and once after the last): it may submit or cancel requests."""
        import torch

        core, batch = self._core, self._core.batch
        with torch.no_grad():
            use_split_linears(True)
            try:
                while True:
                    if between is not None:
                        between()
                    if batch.rows and not batch.live():  # every row cancelled: no step
                        batch.leave(True)
                    if not batch.rows and not len(core.queue):
                        return
                    core.step()
            finally:
                use_split_linears(False)
