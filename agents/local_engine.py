"""`LocalEngine`: a transformers causal LM as a `Policy`, on CPU or GPU.

Requests from many concurrent episodes are batched: a worker thread takes every waiting
request (up to `max_batch_size`), left-pads them into one batch, and decodes them together
with a KV cache, one token per step, finishing each request as soon as it stops. The event
loop never blocks on torch.

`update_weights(state_dict, version)` may be called at any time from any thread; the worker
loads the new weights between two decoding steps, so requests in flight continue with the
new weights (their KV cache from the old weights is kept, as vLLM's "keep" pause does), and
each token records the version that produced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    PolicyError,
    SamplingParams,
)

if TYPE_CHECKING:
    import torch


@dataclass
class _Request:
    """One generate call waiting for (or in) a batch."""

    prompt: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Completion]
    loop: asyncio.AbstractEventLoop
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    generator: Any = None
    finish: FinishReason | None = None

    def resolve(self, value: Completion | BaseException) -> None:
        def set_it() -> None:
            if self.future.done():
                return  # the caller gave up (cancelled, timed out)
            if isinstance(value, BaseException):
                self.future.set_exception(value)
            else:
                self.future.set_result(value)

        # RuntimeError: the caller's event loop is closed, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(set_it)


class LocalEngine:
    """A `Policy` over an in-process transformers model, with batched decoding."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        max_batch_size: int = 16,
        name: str = "local",
        policy_version: int = 0,
    ):

        self.model = model.eval()
        self.tokenizer = tokenizer
        self._renderer = ChatRenderer(tokenizer, chat_template)
        self.max_batch_size = max_batch_size
        self.name = name
        self.policy_version = policy_version
        """Version of the weights now loaded (bumped by `update_weights`)."""
        self.device = next(model.parameters()).device
        self.max_context_tokens: int | None = getattr(model.config, "max_position_embeddings", None)
        """The model's context length (None if the config does not say)."""
        self.steps = 0
        """Decoding steps run so far (all batches)."""
        # transformers renamed `past_key_values` to `cache` (5.x); support both spellings.
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_arg = "logits_to_keep" in params
        pad = tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._pending_update: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._update_lock = threading.Lock()
        self._update_applied = threading.Condition(self._update_lock)
        self._closed = False
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

    # -- Policy ---------------------------------------------------------------------------

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        if self._closed:
            raise PolicyError(f"{self.name} is closed")
        if not prompt_token_ids:
            raise PolicyError("the prompt is empty")
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_token_ids), sampling, loop.create_future(), loop)
        self._queue.put(request)
        return await request.future

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
        self._queue.put(None)
        await asyncio.to_thread(self._worker.join)

    # -- worker thread --------------------------------------------------------------------

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
            self._update_applied.notify_all()

    def _run(self) -> None:
        import torch

        torch.set_grad_enabled(False)
        while True:
            try:
                first = self._queue.get(timeout=0.05)
            except queue.Empty:
                self._apply_update()
                continue
            if first is None:
                return
            if self._closed:
                first.resolve(PolicyError(f"{self.name} is closed"))
                continue
            batch = [first]
            while len(batch) < self.max_batch_size:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)  # finish this batch, then stop
                    break
                batch.append(more)
            self._apply_update()
            try:
                self._decode(batch)
            except Exception as e:  # a failed batch fails its requests, not the engine
                for r in batch:
                    if r.finish is None:
                        r.resolve(
                            PolicyError(f"{self.name}: generation failed: {type(e).__name__}: {e}")
                        )

    def _decode(self, batch: list[_Request]) -> None:
        """Decode one batch to completion, one token per step for every live request."""
        import torch

        for r in batch:
            if r.sampling.seed is not None:
                r.generator = torch.Generator(device=self.device).manual_seed(r.sampling.seed)
        width = max(len(r.prompt) for r in batch)
        # Left padding keeps every request's next token in the last column.
        input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, r in enumerate(batch):
            input_ids[row, width - len(r.prompt) :] = torch.tensor(r.prompt)
            mask[row, width - len(r.prompt) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        past = None
        live = list(range(len(batch)))
        budget = max(r.sampling.max_tokens for r in batch)
        for _ in range(budget):
            kwargs: dict[str, Any] = {self._cache_arg: past}
            if self._keep_arg:
                kwargs["logits_to_keep"] = 1  # only the last position is sampled from
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **kwargs,
            )
            past = out.cache if self._cache_arg == "cache" else out.past_key_values
            logits = out.logits[:, -1, :].float()
            self.steps += 1
            next_ids = torch.full((len(batch),), self._pad_id, dtype=torch.long)
            for row in live:
                r = batch[row]
                token, logprob = _sample(logits[row], r.sampling, r.generator)
                r.ids.append(token)
                r.logprobs.append(logprob)
                r.versions.append(self.policy_version)
                next_ids[row] = token
                r.finish = self._finish_reason(r)
                if r.finish is not None:
                    r.resolve(self._completion(r))
            live = [row for row in live if batch[row].finish is None]
            if not live:
                return
            if self._closed:
                for row in live:
                    batch[row].finish = FinishReason.ABORT
                    batch[row].resolve(PolicyError(f"{self.name} is closed"))
                return
            # In-flight weight update: between two steps, never inside one.
            self._apply_update()
            input_ids = next_ids.view(-1, 1).to(self.device)
            mask = torch.cat(
                [mask, torch.ones((len(batch), 1), dtype=mask.dtype, device=self.device)], 1
            )
            positions = positions[:, -1:] + 1

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
        )


def _sample(logits: torch.Tensor, sampling: SamplingParams, generator: Any) -> tuple[int, float]:
    """Sample one id with the shared sampler (`agents.sampling`); return it with its
    log-probability under the sampling distribution (temperature applied; before top-k/top-p
    truncation, as vLLM reports it)."""
    import torch

    from skyrl_sdk.agents import sampling as sampler

    if sampling.temperature <= 0:
        token = int(sampler.sample(logits, temperature=0.0))
        return token, float(torch.log_softmax(logits, -1)[token])
    scaled = logits / sampling.temperature
    token = int(
        sampler.draw(scaled, top_k=sampling.top_k, top_p=sampling.top_p, generator=generator)
    )
    return token, float(torch.log_softmax(scaled, -1)[token])
