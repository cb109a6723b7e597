"""`LocalEngine`, the engine's front end: a transformers causal LM as a `Policy`, on CPU or GPU.

It takes requests (`generate`, `generate_stream`), weight updates (`update_weights`) and
hands out counters (`stats`); one worker thread (`core.EngineCore`) runs the scheduler's plans
on the model (`runner`); the event loop never blocks on torch.

**Continuous batching** (the default, `scheduling="continuous"`). The worker keeps a running
batch of requests and decodes one token for each of them per step. Between two steps it admits
the requests that arrived meanwhile (up to `max_batch_size` in the batch): each is prefilled on
its own, then its keys and values are written into a free slot of the batch (`batch`, `kv_slots`), so a
request arriving during a long decode starts at the next step instead of waiting for the batch
to end. While a batch runs, a newcomer is not prefilled on its own: its uncached prompt tokens
ride in the next decoding step, packed after the running rows' tokens (`packed_step`;
`mixed_steps=False` turns this off), so the running rows do not wait for its prefill. A
request leaves the batch the moment it finishes or its caller cancels it (a cancelled
`generate`, a closed `generate_stream`), freeing its slot; no other row is copied when one
joins or leaves. Rows of different lengths are right-aligned, padding masked on their left;
each row has its own position ids, so padding never changes what a row computes.
`scheduling="static"` is the older batcher, kept as a baseline: a batch is formed from the
requests waiting when it starts and runs until its last request finishes (finished rows stay
in it), and newcomers wait for the next batch.

**Fair shares** (`fairness`). Admission asks the fairness policy (`fairness`, applied by the `scheduler`)
for the next request instead of taking the oldest: requests are queued per tenant (the
generation context's `episode_id`; `skyrl serve` makes it the session), a tenant holds at
most `fairness.max_rows` rows of the batch (half of it by default, each of `n` choices being a
row) and has at most `fairness.max_queued` requests waiting (one more raises
`TenantQueueFull`), and the tenant holding the fewest rows goes first. Calls without a context
are untenanted and capped only by the batch. While several tenants run, a decoding step
advances only each tenant's fair share of rows (`fairness.rows_to_step`): a hog's other rows
sit the step out, keeping their slots (the column the step adds is masked out for them and
their positions do not move), and the step runs over the advancing rows only, so a newcomer's
steps stay as cheap as a small batch's.

**Prefix reuse** (`prefix_cache_bytes`, 1 GiB by default; 0 turns it off). A multi-turn
episode's prompt grows by appending, and a GRPO group repeats one prompt. The keys and values
of each prompt and of each finished sequence (prompt plus sampled ids) go into a
`prefix_cache.PrefixCache`; a new prompt takes those of its longest cached prefix and only the rest
is computed. An identical prompt (a group's) needs no forward pass at all: the cached entry also
keeps the logits of its last position. Entries are evicted least-recently-used beyond the
budget. Reused keys and values equal recomputed ones up to float rounding (the tests hold
logprobs to 1e-5).

**Weights.** `update_weights(state_dict, version)` may be called at any time from any thread;
the worker loads the new weights between two decoding steps, so requests in flight continue
with the new weights (their keys and values from the old weights are kept, as vLLM's "keep"
pause does), and each token records the version that produced it. Loading new weights moves
the prefix cache to the new version (its entries are versioned; older ones are dropped), and a
sequence whose keys and values mix versions is not stored, so a new
request never reuses keys and values computed with old weights.

**CPU.** The model's linear layers multiply a decoding step's few rows split over every
core (`split_linear`; MKL would run them on one), in the worker thread only.

**Scoring.** `score(prompt_ids, completion_ids)` returns each completion token's logprob under
the loaded weights, computed on the worker through the prefix cache as a prefill would
(`engine.scoring`): the trainer's sync check compares it with the learner's.

**Seeds.** A request with `SamplingParams.seed` samples from its own `torch.Generator`, so it
gets the same tokens alone, batched with others, streamed or not.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.engine.core import EngineCore, build_core
from skyrl_sdk.agents.engine.fairness import FairnessLimits
from skyrl_sdk.agents.engine.kv_slots import KVSlots
from skyrl_sdk.agents.engine.packed_step import supports_mixed_steps
from skyrl_sdk.agents.engine.prefix_cache import DEFAULT_PREFIX_CACHE_BYTES, PrefixCache
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.engine.scheduler import Scheduling
from skyrl_sdk.agents.engine.split_linear import split_small_linears
from skyrl_sdk.agents.engine.stats import EngineStats
from skyrl_sdk.agents.policy import (
    Completion,
    GenerationContext,
    PolicyError,
    SamplingParams,
    TokenChunk,
)

if TYPE_CHECKING:
    import torch

__all__ = ["EngineStats", "LocalEngine", "Scheduling"]


class LocalEngine:
    """A `StreamingPolicy` over an in-process transformers model: continuous batching and
    prefix reuse (see the module docstring)."""

    supports_constraints = True
    """`SamplingParams.constraint` is enforced: a grammar masks each step (`constraints`)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        max_batch_size: int = 16,
        name: str = "local",
        policy_version: int = 0,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
        scheduling: Scheduling | str = Scheduling.CONTINUOUS,
        mixed_steps: bool = True,
        fairness: FairnessLimits | None = None,
        num_threads: int | None = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._renderer = ChatRenderer(tokenizer, chat_template)
        self.max_batch_size = max_batch_size
        self.name = name
        self.scheduling = Scheduling(scheduling)
        """How batches are formed (continuous by default)."""
        self.mixed_steps = (
            mixed_steps and self.scheduling is Scheduling.CONTINUOUS and supports_mixed_steps(model)
        )
        """Whether a request joining a running batch is prefilled in the batch's next decoding
        step (`packed_step`) rather than in a pass of its own before it."""
        self.num_threads = num_threads
        """torch threads of the decoding worker (None: the process's setting). A model as small
        as `tiny` decodes fastest on one: its products are too small to share, and on a busy
        machine a second OpenMP thread waiting for a core made `skyrl eval --policy tiny` 4-16x
        slower (175-666 instead of 2,600-2,900 tokens/s on 2 cores shared with other work)."""
        self.device = next(model.parameters()).device
        if self.device.type == "cpu":
            # Decoding steps multiply a few rows by every weight: spread those over all cores
            # (in the worker thread only; see `split_linear`).
            split_small_linears(model)
        self.max_context_tokens: int | None = getattr(model.config, "max_position_embeddings", None)
        """The model's context length (None if the config does not say)."""
        self.prefix_cache = PrefixCache(prefix_cache_bytes)
        """Keys and values of earlier prompts and sequences (see `prefix_cache`)."""
        self.fairness = fairness or FairnessLimits.for_batch(max_batch_size)
        """Per-tenant caps on rows of the batch and on waiting requests (`fairness`)."""
        self._core = self._build_core(model, policy_version)
        self._worker = threading.Thread(target=self._core.run, name=f"{name}-decode", daemon=True)
        self._worker.start()

    def _build_core(self, model: Any, policy_version: int) -> EngineCore:
        """The worker's parts: queue, scheduler, batch, runner, weights, counters."""
        return build_core(
            self.name,
            model,
            self._renderer,
            self.prefix_cache,
            scheduling=self.scheduling,
            fairness=self.fairness,
            max_batch_size=self.max_batch_size,
            mixed_steps=self.mixed_steps,
            policy_version=policy_version,
            num_threads=self.num_threads,
        )

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, device: str = "cpu", dtype: str = "float32", **kwargs: Any
    ) -> LocalEngine:
        """Load a model directory (weights + tokenizer with a chat template)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
        kwargs.setdefault("name", f"local:{path}")
        return cls(model, tokenizer, **kwargs)

    @property
    def renderer(self) -> ChatRenderer:
        """The chat template's renderer (prompts, turn deltas, reply text)."""
        return self._renderer

    @property
    def policy_version(self) -> int:
        """Version of the weights now loaded (bumped by `update_weights`)."""
        return self._core.weights.version

    @property
    def steps(self) -> int:
        """Decoding steps run so far."""
        return self._core.counters.steps

    @property
    def _slots(self) -> KVSlots | None:
        """The running batch's keys and values (None: no batch; for tests, any thread)."""
        return self._core.batch.slots

    @property
    def _pos(self) -> torch.Tensor | None:
        """The running batch's next positions (None: no batch; for tests, any thread)."""
        return self._core.batch.pos

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters."""
        slots = self._core.batch.slots
        live = slots.copies if slots is not None else 0
        return self._core.counters.snapshot(live, self.prefix_cache.stats())

    @property
    def running(self) -> int:
        """Requests in the running batch now (finished rows of a static batch included)."""
        return self._core.batch.running

    def running_by_tenant(self) -> dict[str | None, int]:
        """Rows of the running batch per tenant now (a snapshot, from any thread)."""
        rows = list(self._core.batch.rows)
        return dict(Counter(r.tenant for r in rows if r is not None and not r.done))

    def queue_room(self, tenant: str | None) -> int | None:
        """How many more of `tenant`'s requests may wait now (None: no cap); a caller about
        to submit several (`n` choices) checks them all at once."""
        return self._core.queue.room(tenant)

    # -- Policy ---------------------------------------------------------------------------

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        """Sample one completion of `prompt_token_ids` (cancelling the call frees its row)."""
        loop = asyncio.get_running_loop()
        request = self._submit(
            prompt_token_ids, sampling, context=context, future=loop.create_future()
        )
        assert request.future is not None
        try:
            return await request.future
        except asyncio.CancelledError:
            request.cancelled = True  # the worker frees the slot at its next step
            raise

    async def generate_stream(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> AsyncIterator[TokenChunk | Completion]:
        """Tokens as they are sampled (`TokenChunk`s, several tokens when the reader lags),
        then the `Completion`. Closing the iterator early cancels the request."""
        request = self._submit(prompt_token_ids, sampling, context=context, chunks=asyncio.Queue())
        assert request.chunks is not None
        try:
            while True:
                item = await request.chunks.get()
                if isinstance(item, TokenChunk):
                    yield _coalesce(item, request.chunks)
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
                    return
        finally:
            if request.finish is None:
                request.cancelled = True

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Queue new weights; they are loaded before the next decoding step (or right away
        when idle). Thread-safe; the latest call wins if several arrive between two steps."""
        self._core.weights.queue(state_dict, version)
        if not self._worker.is_alive():
            self._core.weights.apply()

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Each completion token's logprob under the loaded weights (`agents.scoring.Scorer`),
        computed on the worker between two steps as a rollout's prefill computes it: over the
        prompt's cached keys and values, if the prefix cache holds some (`engine.scoring`)."""
        from skyrl_sdk.agents.engine.scoring import score_on_worker

        if self._core.closed:
            raise PolicyError(f"{self.name} is closed")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[float]] = loop.create_future()

        def job() -> None:
            try:
                result: Any = score_on_worker(
                    self._core.runner, self.prefix_cache, prompt_ids, completion_ids
                )
                setter = done.set_result
            except Exception as e:  # the caller's error, not the worker's
                result, setter = e, done.set_exception
            loop.call_soon_threadsafe(lambda: done.done() or setter(result))

        self._core.weights.at_loaded_weights(job)
        if self._worker.is_alive():
            self._core.queue.wake()  # an idle worker goes round at once
        else:
            self._core.weights.apply()
        return await done

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """Block until weights of at least `version` are loaded; False on timeout."""
        return self._core.weights.wait_for(version, timeout)

    async def aclose(self) -> None:
        """Stop: requests still queued or decoding fail with `PolicyError` (at the next
        decoding step), and the worker thread is joined, so no torch work outlives the engine
        (a thread still decoding at interpreter exit aborts the process)."""
        if self._core.closed:
            return
        self._core.closed = True
        self._core.queue.wake()
        await asyncio.to_thread(self._worker.join)
        self._core.fail_queued()  # anything that slipped in while the worker was stopping

    def _submit(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
        **sink: Any,
    ) -> Request:
        if self._core.closed:
            raise PolicyError(f"{self.name} is closed")
        if not prompt_token_ids:
            raise PolicyError("the prompt is empty")
        if sampling.max_tokens < 1:
            raise PolicyError(f"max_tokens must be >= 1, got {sampling.max_tokens}")
        if sampling.top_logprobs < 0:
            raise PolicyError(f"top_logprobs must be >= 0, got {sampling.top_logprobs}")
        tenant = context.episode_id if context is not None else None
        request = Request(
            list(prompt_token_ids), sampling, asyncio.get_running_loop(), tenant=tenant, **sink
        )
        if sampling.constraint is not None:  # compiled here: a bad grammar fails the caller
            from skyrl_sdk.agents.engine.constraints import GrammarMatcher

            stops = sampling.stop_token_ids or self._renderer.stop_token_ids
            request.grammar = GrammarMatcher(sampling.constraint, self._renderer.tokenizer, stops)
        self._core.queue.put(tenant, request)  # TenantQueueFull past the tenant's queue cap
        return request


def _coalesce(first: TokenChunk, chunks: asyncio.Queue[Any]) -> TokenChunk:
    """`first` and the token chunks already waiting behind it, as one chunk (a lone terminal
    item behind them is put back to be read next)."""
    ids, lps = list(first.token_ids), list(first.logprobs or ())
    while not chunks.empty():
        more = chunks.get_nowait()
        if not isinstance(more, TokenChunk):
            chunks.put_nowait(more)  # a lone terminal item: re-read
            break
        ids += more.token_ids
        lps += more.logprobs or ()
    return TokenChunk(tuple(ids), tuple(lps))
