"""`LocalEngine`: a transformers causal LM as a `Policy`, on CPU or GPU.

One worker thread runs the model; the event loop never blocks on torch.

**Continuous batching** (the default, `scheduling="continuous"`). The worker keeps a running
batch of requests and decodes one token for each of them per step. Between two steps it admits
the requests that arrived meanwhile (up to `max_batch_size` in the batch): each is prefilled on
its own, then its keys and values are written into a free slot of the batch (`kv_slots`), so a
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

**Fair shares** (`fairness`). Admission asks the fairness policy (`agents/fairness.py`)
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
`kv_cache.PrefixCache`; a new prompt takes those of its longest cached prefix and only the rest
is computed. An identical prompt (a group's) needs no forward pass at all: the cached entry also
keeps the logits of its last position. Entries are evicted least-recently-used beyond the
budget. Reused keys and values equal recomputed ones up to float rounding (the tests hold
logprobs to 1e-5).

**Weights.** `update_weights(state_dict, version)` may be called at any time from any thread;
the worker loads the new weights between two decoding steps, so requests in flight continue
with the new weights (their keys and values from the old weights are kept, as vLLM's "keep"
pause does), and each token records the version that produced it. Loading new weights empties
the prefix cache, and a sequence whose keys and values mix versions is not stored, so a new
request never reuses keys and values computed with old weights.

**CPU.** The model's linear layers multiply a decoding step's few rows split over every
core (`split_linear`; MKL would run them on one), in the worker thread only.

**Seeds.** A request with `SamplingParams.seed` samples from its own `torch.Generator`, so it
gets the same tokens alone, batched with others, streamed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import threading
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.fairness import FairnessLimits, FairQueue, rows_to_step
from skyrl_sdk.agents.kv_cache import DEFAULT_PREFIX_CACHE_BYTES, KV, PrefixCache, PrefixCacheStats
from skyrl_sdk.agents.kv_slots import MIN_SPARE, KVSlots
from skyrl_sdk.agents.packed_step import (
    MAX_MIXED_CHUNK,
    MixPlan,
    mixed_attention,
    mixed_layers,
    supports_mixed_steps,
)
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    PolicyError,
    SamplingParams,
    TokenChunk,
)
from skyrl_sdk.agents.split_linear import split_small_linears, use_split_linears

if TYPE_CHECKING:
    import torch


class Scheduling(enum.Enum):
    """How `LocalEngine` forms batches."""

    CONTINUOUS = "continuous"
    """Requests join the running batch at the next step and leave it when they finish."""
    STATIC = "static"
    """A batch takes the requests waiting when it starts and runs until all of them finish
    (the baseline of `skyrl bench engine`)."""


@dataclass(frozen=True)
class EngineStats:
    """Counters of a `LocalEngine` since it started."""

    steps: int
    """Decoding steps (one forward pass of the running batch each)."""
    prefills: int
    """Prefill forward passes (one per admitted request whose prompt was not wholly cached)."""
    prompt_tokens: int
    """Prompt tokens of all admitted requests."""
    prompt_tokens_computed: int
    """Prompt tokens run through the model (the rest came from the prefix cache)."""
    prompt_tokens_reused: int
    """Prompt tokens whose keys and values came from the prefix cache."""
    generated_tokens: int
    """Tokens sampled."""
    cancelled: int
    """Requests that left because their caller cancelled them."""
    mixed_steps: int
    """Decoding steps that also prefilled a request joining the batch (`packed_step`)."""
    rows_sat_out: int
    """Row-steps sat out for the fair share of a step (`fairness.rows_to_step`): one per row
    per step it did not advance in."""
    batch_copies: int
    """Times the running batch's keys and values were copied into new buffers (out of room,
    or a mostly empty batch compacted); a request joining or leaving copies no other row."""
    prefix_cache: PrefixCacheStats
    """The prefix cache's own counters."""


@dataclass(eq=False)
class _Request:
    """One generate call: waiting in the queue, then a row of the running batch."""

    prompt: list[int]
    sampling: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion] | None = None
    """Where `generate` waits for the completion."""
    chunks: asyncio.Queue[Any] | None = None
    """Where `generate_stream` reads tokens, then the completion (or an exception)."""
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    top: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    generator: Any = None
    finish: FinishReason | None = None
    cancelled: bool = False
    """Set by the caller's thread when it gives up; the worker drops the row at its next step."""
    kv_version: int = 0
    """Weights version when its keys and values started (admission)."""
    skipped: int = 0
    """Decoding steps it sat out for the fair share of a step (`fairness.rows_to_step`)."""
    tenant: str | None = None
    """Whose request it is (the context's `episode_id`; None: an untenanted caller), for
    the fair share of the batch (`fairness`)."""

    @property
    def done(self) -> bool:
        return self.finish is not None or self.cancelled

    def _call(self, fn: Any, *args: Any) -> None:
        # RuntimeError: the caller's event loop is closed, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, *args)

    def emit(self, token: int, logprob: float) -> None:
        """Hand one sampled token to a streaming caller."""
        if self.chunks is not None:
            self._call(self.chunks.put_nowait, TokenChunk((token,), (logprob,)))

    def resolve(self, value: Completion | BaseException) -> None:
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


class LocalEngine:
    """A `StreamingPolicy` over an in-process transformers model: continuous batching and
    prefix reuse (see the module docstring)."""

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
        self.policy_version = policy_version
        """Version of the weights now loaded (bumped by `update_weights`)."""
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
        """Keys and values of earlier prompts and sequences (see `kv_cache`)."""
        self.steps = 0
        """Decoding steps run so far."""
        self._check_cache_layers(model)
        # transformers renamed `past_key_values` to `cache` (5.x); support both spellings.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_arg = "logits_to_keep" in params
        pad = tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)
        self.fairness = fairness or FairnessLimits.for_batch(max_batch_size)
        """Per-tenant caps on rows of the batch and on waiting requests (`fairness`)."""
        self._queue: FairQueue[_Request] = FairQueue(self.fairness, alive=lambda r: not r.done)
        self._pending_update: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._update_lock = threading.Lock()
        self._update_applied = threading.Condition(self._update_lock)
        self._closed = False
        self._counts = dict.fromkeys(
            (
                "prefills",
                "prompt",
                "computed",
                "reused",
                "generated",
                "cancelled",
                "copies",
                "mixed",
                "sat_out",
            ),
            0,
        )
        # The running batch (worker thread only): one slot per row (None: free, until the next
        # request takes it), their keys and values right-aligned in `_slots`, the padding mask,
        # each row's next position and next input token.
        self._rows: list[_Request | None] = []
        self._slots: KVSlots | None = None
        self._mask: torch.Tensor | None = None
        self._pos: torch.Tensor | None = None
        self._next: torch.Tensor | None = None
        self._worker = threading.Thread(target=self._run, name=f"{name}-decode", daemon=True)
        self._worker.start()

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
        return self._renderer

    def stats(self) -> EngineStats:
        """A snapshot of the engine's counters."""
        c = self._counts
        return EngineStats(
            steps=self.steps,
            prefills=c["prefills"],
            prompt_tokens=c["prompt"],
            prompt_tokens_computed=c["computed"],
            prompt_tokens_reused=c["reused"],
            generated_tokens=c["generated"],
            cancelled=c["cancelled"],
            mixed_steps=c["mixed"],
            rows_sat_out=c["sat_out"],
            batch_copies=c["copies"] + (self._slots.copies if self._slots is not None else 0),
            prefix_cache=self.prefix_cache.stats(),
        )

    @property
    def running(self) -> int:
        """Requests in the running batch now (finished rows of a static batch included)."""
        return sum(r is not None for r in self._rows)

    def running_by_tenant(self) -> dict[str | None, int]:
        """Rows of the running batch per tenant now (a snapshot, from any thread)."""
        return dict(Counter(r.tenant for r in list(self._rows) if r is not None and not r.done))

    def queue_room(self, tenant: str | None) -> int | None:
        """How many more of `tenant`'s requests may wait now (None: no cap); a caller about
        to submit several (`n` choices) checks them all at once."""
        return self._queue.room(tenant)

    # -- Policy ---------------------------------------------------------------------------

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
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
                    ids, lps = list(item.token_ids), list(item.logprobs or ())
                    while not request.chunks.empty():  # coalesce what is already waiting
                        more = request.chunks.get_nowait()
                        if not isinstance(more, TokenChunk):
                            request.chunks.put_nowait(more)  # a lone terminal item: re-read
                            break
                        ids += more.token_ids
                        lps += more.logprobs or ()
                    yield TokenChunk(tuple(ids), tuple(lps))
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
        with self._update_lock:
            self._pending_update = (state_dict, version)
        if not self._worker.is_alive():
            self._apply_update()

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """Block until weights of at least `version` are loaded; False on timeout."""
        with self._update_applied:
            return self._update_applied.wait_for(lambda: self.policy_version >= version, timeout)

    async def aclose(self) -> None:
        """Stop: requests still queued or decoding fail with `PolicyError` (at the next
        decoding step), and the worker thread is joined, so no torch work outlives the engine
        (a thread still decoding at interpreter exit aborts the process)."""
        if self._closed:
            return
        self._closed = True
        self._queue.wake()
        await asyncio.to_thread(self._worker.join)
        self._fail_queued()  # anything that slipped in while the worker was stopping

    def _submit(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
        **sink: Any,
    ) -> _Request:
        if self._closed:
            raise PolicyError(f"{self.name} is closed")
        if not prompt_token_ids:
            raise PolicyError("the prompt is empty")
        if sampling.max_tokens < 1:
            raise PolicyError(f"max_tokens must be >= 1, got {sampling.max_tokens}")
        if sampling.top_logprobs < 0:
            raise PolicyError(f"top_logprobs must be >= 0, got {sampling.top_logprobs}")
        tenant = context.episode_id if context is not None else None
        request = _Request(
            list(prompt_token_ids), sampling, asyncio.get_running_loop(), tenant=tenant, **sink
        )
        self._queue.put(tenant, request)  # TenantQueueFull past the tenant's queue cap
        return request

    # -- worker thread --------------------------------------------------------------------

    def _check_cache_layers(self, model: Any) -> None:
        """Rows are merged and sliced by hand: only plain full-attention caches qualify."""
        from transformers.cache_utils import DynamicCache, DynamicLayer

        try:
            layers = DynamicCache(config=model.config).layers
        except Exception:  # a config DynamicCache cannot read: layers are made lazily
            return
        other = sorted({type(layer).__name__ for layer in layers} - {DynamicLayer.__name__})
        if other:
            raise ValueError(
                f"LocalEngine needs full-attention KV caches; {type(model).__name__} uses "
                f"{', '.join(other)} (sliding-window or linear-attention layers)"
            )

    def _apply_update(self) -> None:
        with self._update_lock:
            pending, self._pending_update = self._pending_update, None
            if pending is None:
                return
            state_dict, version = pending
            import torch

            with torch.no_grad():
                self.model.load_state_dict(state_dict, strict=True)
            self.policy_version = version
            self.prefix_cache.clear()  # keys and values of the old weights: never reused
            self._update_applied.notify_all()

    def _run(self) -> None:
        import torch

        torch.set_grad_enabled(False)
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)  # this thread's (OpenMP's are per thread)
        use_split_linears()
        while True:
            if self._closed:
                self._fail_rows(self._rows)
                self._fail_queued()
                return
            self._apply_update()  # between two steps, never inside one
            mix = self._admit()
            if not self._rows:
                continue
            try:
                self._step() if mix is None else self._mixed_step(*mix)
            except Exception as e:  # a failed step fails its requests, not the engine
                if mix is not None and not mix[0].done:
                    self._fail_rows([mix[0]], e)
                self._fail_rows(self._rows, e)

    def _fail_rows(self, rows: list[_Request], error: Exception | None = None) -> None:
        message = (
            f"{self.name} is closed"
            if error is None
            else f"{self.name}: generation failed: {type(error).__name__}: {error}"
        )
        for r in rows:
            if r is not None and not r.done:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(message))
        if rows is self._rows:
            self._reset()

    def _reset(self) -> None:
        """Drop the running batch (every row has left)."""
        if self._slots is not None:
            self._counts["copies"] += self._slots.copies
        self._rows, self._slots, self._mask, self._pos, self._next = [], None, None, None, None

    def _fail_queued(self) -> None:
        for r in self._queue.drain():
            if not r.done:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(f"{self.name} is closed"))

    def _admit(self) -> tuple[_Request, int, KV | None] | None:
        """Prefill the requests that arrived (continuous: up to the free slots; static: only
        when the batch is empty) and add them to the running batch. With a batch running and
        mixed steps on, the first request that needs a forward pass is handed back instead
        (with its reusable prefix), to be prefilled inside the next decoding step."""
        if self.scheduling is Scheduling.STATIC and self._rows:
            return None
        joining: list[tuple[_Request, KV, int]] = []
        mix: tuple[_Request, int, KV | None] | None = None
        while self.running + len(joining) < self.max_batch_size:
            # The fairness policy picks the next request: a tenant at its share of the
            # batch waits, and the tenant holding the fewest rows goes first.
            rows = Counter(row.tenant for row in self._rows if row is not None)
            rows.update(j.tenant for j, _, _ in joining)
            # idle: wait a little, then go round (weight updates, close)
            r = self._queue.take(rows, timeout=0 if self._rows or joining else 0.05)
            if r is None:
                break
            if self._closed:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(f"{self.name} is closed"))
                break
            if r.cancelled:
                self._counts["cancelled"] += 1
                continue
            # Weights queued before this request arrived are loaded before it starts (a
            # trainer that publishes, then samples, gets tokens of the new version).
            self._apply_update()
            found = self._lookup(r)
            reuse, past, cached_logits = found
            mixable = cached_logits is None and len(r.prompt) - reuse <= MAX_MIXED_CHUNK
            if self.mixed_steps and self._rows and not joining and mixable:
                mix = (r, reuse, past)
                break
            try:
                kv, logits = self._prefill(r, found)
                first = self._sample_into(r, logits)
            except Exception as e:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(f"{self.name}: generation failed: {type(e).__name__}: {e}"))
                continue
            if r.finish is None:
                joining.append((r, kv, first))
        if joining:
            self._join(joining)
        return mix

    def _prefill(
        self, r: _Request, found: tuple[int, KV | None, torch.Tensor | None]
    ) -> tuple[KV, torch.Tensor]:
        """Keys and values of `r.prompt` (from the longest cached prefix, `found` by `_lookup`,
        then a forward pass over the rest) and the logits of its last position."""
        import torch

        self._start(r)
        n = len(r.prompt)
        reuse, past, logits = found
        if logits is not None:  # the same prompt: no forward pass
            assert past is not None
            self._counts["reused"] += n
            return past, logits
        cache = _cache(past)
        out = self._forward(
            cache,
            input_ids=torch.tensor([r.prompt[reuse:]], dtype=torch.long, device=self.device),
            position_ids=torch.arange(reuse, n, device=self.device).view(1, -1),
        )
        kv = _kv_of(cache)
        logits = out.logits[0, -1].float()
        self._counts["prefills"] += 1
        self._counts["computed"] += n - reuse
        self._counts["reused"] += reuse
        if self.prefix_cache.enabled:
            # A group's other requests find the whole prompt here, logits included.
            self.prefix_cache.insert(r.prompt, kv, logits)
        return kv, logits

    def _start(self, r: _Request) -> None:
        """Admission bookkeeping: `r`'s sampler and the weights its keys and values start with."""
        import torch

        if r.sampling.seed is not None:
            r.generator = torch.Generator(device=self.device).manual_seed(r.sampling.seed)
        r.kv_version = self.policy_version
        self._counts["prompt"] += len(r.prompt)

    def _lookup(self, r: _Request) -> tuple[int, KV | None, torch.Tensor | None]:
        """What the prefix cache holds for `r.prompt`: (tokens reused, their keys and values,
        and the next-token logits when the whole prompt is cached with them)."""
        import torch

        if not self.prefix_cache.enabled:
            return 0, None, None
        n = len(r.prompt)
        match = self.prefix_cache.lookup(torch.tensor(r.prompt, dtype=torch.long))
        if match is None:
            return 0, None, None
        whole = match.length == n == match.entry.tokens.numel()
        if whole and match.entry.next_logits is not None:
            return n, match.entry.kv, match.entry.next_logits
        reuse = min(match.length, n - 1)
        past = [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in match.entry.kv] if reuse else None
        return reuse, past, None

    def _forward(self, cache: Any, **inputs: Any) -> Any:
        """One forward pass that appends to `cache` (a `DynamicCache`, updated in place)."""
        inputs[self._cache_arg] = cache
        if self._keep_arg:
            inputs["logits_to_keep"] = 1  # only the last position is sampled from
        return self.model(use_cache=True, **inputs)

    def _join(self, joining: list[tuple[_Request, KV, int]]) -> None:
        """Add prefilled requests to the running batch: each takes a free slot (or a new one),
        right-aligned, with padding on its left masked out. The other rows stay where they
        are: nothing is copied unless the buffers run out of room (see `kv_slots`)."""
        import torch

        lengths = [len(r.prompt) for r, _, _ in joining]
        if self._slots is None:
            width = max(lengths)
            self._slots = KVSlots([kv for _, kv, _ in joining], width)
            self._rows = [r for r, _, _ in joining]
            self._mask = torch.zeros((len(joining), width), dtype=torch.long, device=self.device)
            for slot, n in enumerate(lengths):
                self._mask[slot, width - n :] = 1
            self._pos = torch.tensor(lengths, dtype=torch.long, device=self.device)
            self._next = torch.tensor([t for _, _, t in joining], device=self.device)
            return
        free = self._free_slots(len(joining))
        self._widen(max(lengths))
        assert self._mask is not None and self._pos is not None and self._next is not None
        width = self._slots.width
        for (r, kv, first), n, slot in zip(joining, lengths, free, strict=False):
            self._slots.write(slot, kv)
            self._mask[slot] = 0
            self._mask[slot, width - n :] = 1
            self._pos[slot] = n
            self._next[slot] = first
            self._rows[slot] = r

    def _free_slots(self, count: int) -> list[int]:
        """`count` free slots of the running batch, adding slots if there are too few."""
        import torch

        assert self._slots is not None and self._mask is not None
        assert self._pos is not None and self._next is not None
        free = [i for i, r in enumerate(self._rows) if r is None][:count]
        extra = count - len(free)
        if extra > 0:
            free += range(len(self._rows), len(self._rows) + extra)
            self._slots.add_slots(extra)
            self._rows += [None] * extra
            self._mask = torch.cat([self._mask, self._mask.new_zeros((extra, self._slots.width))])
            self._pos = torch.cat([self._pos, self._pos.new_zeros(extra)])
            self._next = torch.cat([self._next, self._next.new_zeros(extra)])
        return free

    def _widen(self, width: int) -> None:
        """At least `width` columns in use (new ones are padding, on the left)."""
        import torch

        assert self._slots is not None and self._mask is not None
        if width > self._slots.width:
            pad = self._mask.new_zeros((len(self._rows), width - self._slots.width))
            self._mask = torch.cat([pad, self._mask], 1)
            self._slots.widen(width)

    def _stepping(self, newcomer: _Request | None = None) -> list[int] | None:
        """The slots that advance this step under the fair share of a step
        (`fairness.rows_to_step`; `newcomer`, prefilled in this step, always advances and counts
        for its tenant); None: every slot does (the plain step)."""
        if self.scheduling is Scheduling.STATIC or self.fairness.step_rows is None:
            return None
        live = [i for i, r in enumerate(self._rows) if r is not None and not r.done]
        rows: list[_Request] = [self._rows[i] for i in live]  # type: ignore[misc]
        if newcomer is not None:
            rows.append(newcomer)
        tenants = [r.tenant for r in rows]
        if len(set(tenants)) < 2:
            return None
        # The newcomer must advance (its prefill is this step): it ranks first.
        skipped = [r.skipped for r in rows[: len(live)]] + [1 << 62] * (newcomer is not None)
        chosen = rows_to_step(tenants, skipped, self.fairness.step_rows)
        if len(chosen) == len(rows):
            return None
        stepping = set(chosen)
        for k in range(len(live)):
            if k not in stepping:
                rows[k].skipped += 1
                self._counts["sat_out"] += 1
        return [live[k] for k in chosen if k < len(live)]

    def _step(self) -> None:
        """One decoding step: every row gets one token (or the fair share's rows do, see
        `_subset_step`); finished and cancelled rows leave (continuous) or stay until the
        whole batch is done (static)."""
        import torch

        stepping = self._stepping()
        if stepping is not None:
            self._subset_step(stepping)
            return
        assert self._mask is not None and self._pos is not None and self._next is not None
        batch = len(self._rows)
        mask = torch.cat([self._mask, self._mask.new_ones((batch, 1))], 1)
        assert self._slots is not None
        self._slots.reserve(1)
        cache = _cache(None)
        cache.layers.extend(self._slots.layers())  # written in place, no copy of the past
        out = self._forward(
            cache,
            input_ids=self._next.view(batch, 1),
            attention_mask=mask,
            position_ids=self._pos.view(batch, 1),
        )
        self._slots.advance(1)
        self._mask = mask
        # A free slot's position stays 0 (models with learned positions have a bound).
        alive = torch.tensor([r is not None for r in self._rows], device=self.device)
        self._pos = (self._pos + 1) * alive
        self.steps += 1
        self._next = self._sample_rows(range(batch), out.logits[:, -1, :].float())
        self._leave()

    def _subset_step(self, stepping: list[int]) -> None:
        """A decoding step of the slots `stepping` only: the others keep their keys and values
        and next token, and the column this step adds is padding for them (masked out, their
        positions unchanged), so what a row computes does not depend on the steps it sat out.
        The forward pass runs over the stepping rows alone (their past gathered per layer):
        its cost is that of a batch of `len(stepping)` rows."""
        import torch

        assert self._slots is not None and self._mask is not None
        assert self._pos is not None and self._next is not None
        index = torch.tensor(stepping, dtype=torch.long, device=self.device)
        batch = len(self._rows)
        mask = torch.cat([self._mask, self._mask.new_zeros((batch, 1))], 1)
        mask[index, -1] = 1
        self._slots.reserve(1)
        cache = _cache(None)
        cache.layers.extend(_subset_layers(self._slots, index))
        out = self._forward(
            cache,
            input_ids=self._next[index].view(-1, 1),
            attention_mask=mask[index],
            position_ids=self._pos[index].view(-1, 1),
        )
        self._slots.advance(1)
        self._mask = mask
        self._pos[index] += 1
        self.steps += 1
        self._next = self._sample_rows(stepping, out.logits[:, -1, :].float())
        self._leave()
        self._squeeze()

    def _squeeze(self) -> None:
        """Close the gaps of rows that sat steps out once the batch's columns number more than
        twice its longest row's (plus `MIN_SPARE`): each such row's own columns are copied,
        right-aligned, within its slot, and the width trimmed to the longest row. So sitting
        out never grows the keys and values kept, nor a step's attention, past that bound
        (amortized: one copy of a row per doubling)."""
        if self._slots is None or self._mask is None or self._pos is None:
            return
        longest = int(self._pos.max())
        if self._slots.width <= 2 * longest + MIN_SPARE:
            return
        kv = self._slots.kv()
        for i, r in enumerate(self._rows):
            n = int(self._pos[i])
            if r is None or r.done or int(self._mask[i, -n:].sum()) == n:
                continue  # free, leaving, or already contiguous at the right
            cols = self._mask[i].nonzero().view(-1)
            self._slots.write(i, [(k[i : i + 1, :, cols], v[i : i + 1, :, cols]) for k, v in kv])
            self._mask[i] = 0
            self._mask[i, -n:] = 1
        self._mask = self._mask[:, -longest:]
        self._slots.trim(longest)

    def _sample_rows(self, rows: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """Each running row of `rows` samples its next token from its line of `logits`;
        finished rows keep their keys and values (`_store`). Returns the next input ids."""
        assert self._next is not None
        next_ids = self._next.clone()
        for line, row in enumerate(rows):
            r = self._rows[row]
            if r is None or r.done:
                continue
            next_ids[row] = self._sample_into(r, logits[line])
            if r.finish is not None:
                self._store(row, r)
        return next_ids

    def _mixed_step(self, newcomer: _Request, reuse: int, past: KV | None) -> None:
        """A decoding step that also prefills `newcomer` (see `packed_step`): one packed pass
        over the running rows' next tokens and the newcomer's uncached prompt tokens. The
        newcomer takes a free slot, its reused prefix written so that its row ends where the
        others do; it samples its first token from this pass and decodes with the rest from
        the next step on."""
        import torch

        assert self._slots is not None and self._mask is not None
        assert self._pos is not None and self._next is not None
        r, n = newcomer, len(newcomer.prompt)
        chunk = n - reuse
        self._start(r)
        (slot,) = self._free_slots(1)
        self._widen(n - 1)  # its row, less the column this step adds, must fit
        assert self._mask is not None and self._pos is not None and self._next is not None
        self._slots.reserve(1)
        if past is not None:
            self._slots.write(slot, past, end=self._slots.hi + 1 - chunk)
        stepping = self._stepping(r)
        if stepping is None:
            decoding = [i for i, row in enumerate(self._rows) if row is not None]
        else:
            decoding = stepping
        index = torch.tensor(decoding, dtype=torch.long, device=self.device)
        batch = len(self._rows)
        mask = torch.cat([self._mask, self._mask.new_ones((batch, 1))], 1)
        if stepping is not None:  # the rows sitting this step out: its column is padding
            sitting = [
                i for i, row in enumerate(self._rows) if row is not None and i not in stepping
            ]
            mask[sitting, -1] = 0
        plan = MixPlan(self._slots, index, slot, reuse, chunk, mask.bool()[:, None, None, :])
        ids = torch.tensor(r.prompt[reuse:], dtype=torch.long, device=self.device)
        positions = torch.arange(reuse, n, device=self.device)
        cache = _cache(None)
        cache.layers.extend(mixed_layers(plan))
        keep = torch.arange(len(decoding) + 1, device=self.device)
        keep[-1] = len(decoding) + chunk - 1  # each decoding row's position, the chunk's last
        with mixed_attention(self.model):
            out = self.model(
                input_ids=torch.cat([self._next[index], ids]).view(1, -1),
                position_ids=torch.cat([self._pos[index], positions]).view(1, -1),
                attention_mask=mask.new_ones((1, 1, 1, 1), dtype=torch.bool),  # unused
                use_cache=True,
                logits_to_keep=keep,
                skyrl_mix=plan,
                **{self._cache_arg: cache},
            )
        self._slots.advance(1)
        mask[slot] = 0
        mask[slot, mask.shape[1] - n :] = 1
        self._mask = mask
        self._pos[index] += 1
        self._pos[slot] = n
        self.steps += 1
        self._counts["mixed"] += 1
        self._counts["prefills"] += 1
        self._counts["computed"] += chunk
        self._counts["reused"] += reuse
        logits = out.logits[0].float()
        next_ids = self._sample_rows(decoding, logits)
        first = self._sample_into(r, logits[-1])
        if self.prefix_cache.enabled:  # a group's other requests find the whole prompt here
            self.prefix_cache.insert(r.prompt, self._slots.row(slot, n), logits[-1])
        if r.finish is None:
            self._rows[slot] = r
            next_ids[slot] = first
        else:  # done with its first token: the slot stays free
            self._mask[slot] = 0
            self._pos[slot] = 0
        self._next = next_ids
        self._leave()
        if stepping is not None:
            self._squeeze()

    def _sample_into(self, r: _Request, logits: torch.Tensor) -> int:
        """Sample `r`'s next token from `logits`, record it, hand it out, and resolve `r` if
        it is finished."""
        token, logprob, top = _sample_top(logits, r.sampling, r.generator)
        r.ids.append(token)
        r.logprobs.append(logprob)
        r.versions.append(self.policy_version)
        if r.sampling.top_logprobs:
            r.top.append(top)
        self._counts["generated"] += 1
        r.emit(token, logprob)
        r.finish = self._finish_reason(r)
        if r.finish is not None:
            r.resolve(self._completion(r))
        return token

    def _store(self, row: int, r: _Request) -> None:
        """Keep a finished row's keys and values (its prompt and all but the last sampled
        token) for the next turn, unless new weights were loaded since it started."""
        if not self.prefix_cache.enabled or r.kv_version != self.policy_version:
            return
        assert self._slots is not None and self._pos is not None and self._mask is not None
        n = int(self._pos[row])
        if r.skipped:  # its columns have holes (the steps it sat out): take only its own
            cols = self._mask[row].nonzero().view(-1)
            kv = [
                (k[row : row + 1, :, cols], v[row : row + 1, :, cols]) for k, v in self._slots.kv()
            ]
        else:
            kv = self._slots.row(row, n)
        self.prefix_cache.insert([*r.prompt, *r.ids[:-1]], kv)

    def _leave(self) -> None:
        """Free the slots of finished and cancelled rows (static: only once all are), then
        drop the padding columns no row needs any more. A batch that has become mostly free
        slots is compacted (the one copy here)."""
        import torch

        for r in self._rows:
            if r is not None and r.cancelled and r.finish is None:
                r.finish = FinishReason.ABORT
                self._counts["cancelled"] += 1
        live = [i for i, r in enumerate(self._rows) if r is not None and r.finish is None]
        if len(live) == self.running:
            return
        if not live:
            self._reset()
            return
        if self.scheduling is Scheduling.STATIC:
            return
        assert self._slots is not None and self._mask is not None
        assert self._pos is not None and self._next is not None
        for i, r in enumerate(self._rows):
            if r is not None and r.finish is not None:
                self._rows[i] = None
                self._mask[i] = 0  # a free slot attends only to its own new columns
                self._pos[i] = 0
        if len(live) <= len(self._rows) // 2:
            index = torch.tensor(live, device=self.device)
            self._slots.select(live)
            self._rows = [self._rows[i] for i in live]
            self._mask = self._mask.index_select(0, index)
            self._pos = self._pos.index_select(0, index)
            self._next = self._next.index_select(0, index)
        # Rows are right-aligned: the earliest-starting live row sets the width (a row that
        # sat steps out spans more columns than its length; argmax finds its first column).
        rows = torch.tensor(
            [i for i, r in enumerate(self._rows) if r is not None], device=self.device
        )
        width = self._mask.shape[1] - int(self._mask[rows].argmax(1).min())
        if width < self._slots.width:
            self._mask = self._mask[:, -width:]
            self._slots.trim(width)

    def _finish_reason(self, r: _Request) -> FinishReason | None:
        if r.ids[-1] in r.sampling.stop_token_ids:
            return FinishReason.STOP
        if r.sampling.stop:
            # A stop string spans at most len(utf-8 bytes) tokens: decode only that tail.
            window = max(len(s.encode()) for s in r.sampling.stop) + 1
            tail = self.tokenizer.decode(r.ids[-window:], skip_special_tokens=False)
            if any(s in tail for s in r.sampling.stop):
                return FinishReason.STOP
        if len(r.ids) >= r.sampling.max_tokens:
            return FinishReason.LENGTH
        return None

    def _completion(self, r: _Request) -> Completion:
        versions = tuple(r.versions)
        return Completion(
            token_ids=tuple(r.ids),
            logprobs=tuple(r.logprobs),
            text=self._renderer.content_text(r.ids),
            finish_reason=r.finish or FinishReason.ABORT,
            policy_version=versions[-1],
            token_policy_versions=versions if len(set(versions)) > 1 else (),
            top_logprobs=tuple(r.top) if r.sampling.top_logprobs else None,
        )


def _cache(kv: KV | None) -> Any:
    """A transformers `DynamicCache` holding `kv` (its tensors, not copies)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = DynamicCache()
    for k, v in kv or ():
        layer = DynamicLayer()
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
        cache.layers.append(layer)
    return cache


def _subset_layers(slots: KVSlots, index: torch.Tensor) -> list[Any]:
    """transformers cache layers for a decoding step of the slots `index` only (see
    `LocalEngine._subset_step`): each writes the new column of those slots at `hi` and hands
    attention their columns in use (a gathered copy, `len(index)` rows)."""
    cls = _subset_layer_class()
    return [cls(slots, i, index) for i in range(slots.num_layers)]


@functools.cache
def _subset_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class SubsetLayer(DynamicLayer):
        """One layer of a `KVSlots` for a step of some of its slots."""

        def __init__(self, slots: KVSlots, layer: int, index: torch.Tensor):
            super().__init__()
            self._slots, self._index = slots, index
            self._k, self._v = slots.buffers(layer)
            # Only the shape is read before `update` (the past's length): a view, no gather.
            self.device = self._k.device
            self.keys = self._k[: index.numel(), :, slots.lo : slots.hi]
            self.values = self._v[: index.numel(), :, slots.lo : slots.hi]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            s, index = self._slots, self._index
            hi, t = s.hi, key_states.shape[-2]
            self._k[index, :, hi : hi + t] = key_states
            self._v[index, :, hi : hi + t] = value_states
            self.keys = self._k[index, :, s.lo : hi + t]
            self.values = self._v[index, :, s.lo : hi + t]
            return self.keys, self.values

    return SubsetLayer


def _kv_of(cache: Any) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _sample_top(
    logits: torch.Tensor, sampling: SamplingParams, generator: Any
) -> tuple[int, float, tuple[tuple[int, float], ...]]:
    """`_sample`, plus the `sampling.top_logprobs` most likely alternatives under the same
    distribution (most likely first)."""
    import torch

    from skyrl_sdk.agents import sampling as sampler

    if sampling.temperature <= 0:
        token = int(sampler.sample(logits, temperature=0.0))
        logp = torch.log_softmax(logits, -1)
    else:
        scaled = logits / sampling.temperature
        token = int(
            sampler.draw(scaled, top_k=sampling.top_k, top_p=sampling.top_p, generator=generator)
        )
        logp = torch.log_softmax(scaled, -1)
    top: tuple[tuple[int, float], ...] = ()
    if sampling.top_logprobs:
        values, ids = torch.topk(logp, min(sampling.top_logprobs, logp.shape[-1]))
        top = tuple(zip(ids.tolist(), values.tolist(), strict=True))
    return token, float(logp[token]), top


def _sample(logits: torch.Tensor, sampling: SamplingParams, generator: Any) -> tuple[int, float]:
    """Sample one id with the shared sampler (`agents.sampling`); return it with its
    log-probability under the sampling distribution (temperature applied; before top-k/top-p
    truncation, as vLLM reports it)."""
    token, logprob, _ = _sample_top(logits, sampling, generator)
    return token, logprob
