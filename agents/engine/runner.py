"""`ModelRunner`: executes the scheduler's plans on the model (the worker thread only).

- `prefill` computes an admitted request's prompt on its own: the keys and values of its
  longest cached prefix (`prefix_cache`), then a forward pass over the rest (none at all for a
  wholly cached prompt, whose next-token logits the cache kept), and samples its first token.
- `execute` runs one `StepPlan`: a decoding step of every row (`DECODE`), of the fair share's
  rows only (`SUBSET`: the others keep their keys and values and next token, and the column
  the step adds is padding for them, so what a row computes does not depend on the steps it
  sat out; the pass runs over the stepping rows alone, at the cost of a batch that small), or
  a mixed step that also prefills a newcomer (`MIXED`, `packed_step`).

Each sampled token goes to its request (`sampler.sample_top`, with the request's own
generator when it is seeded, so it gets the same tokens alone or batched); a finished
request's keys and values go into the prefix cache for its next turn, and finished rows leave
the batch (`RunningBatch.leave`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.engine.batch import RunningBatch
from skyrl_sdk.agents.engine.kv_slots import subset_layers
from skyrl_sdk.agents.engine.options import LogprobMode
from skyrl_sdk.agents.engine.packed_step import MixPlan, mixed_attention, mixed_layers
from skyrl_sdk.agents.engine.prefix_cache import KV, CachedPrefix, PrefixCache
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.engine.scheduler import Admission, StepKind, StepPlan
from skyrl_sdk.agents.engine.stats import Counters
from skyrl_sdk.agents.engine.weights import WeightSync

if TYPE_CHECKING:
    import torch


class ModelRunner:
    """Forward passes and sampling for the running batch (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        renderer: ChatRenderer,
        batch: RunningBatch,
        prefix_cache: PrefixCache,
        weights: WeightSync,
        counters: Counters,
        *,
        frees_finished_rows: bool,
    ):
        self.model = model
        self.tokenizer = renderer.tokenizer
        self.renderer = renderer
        self.batch = batch
        self.prefix_cache = prefix_cache
        self.weights = weights
        self.counters = counters
        self.frees_finished_rows = frees_finished_rows
        """Whether finished rows leave at once (continuous) or with the batch (static)."""
        self.device = batch.device
        check_cache_layers(model)
        # transformers renamed `past_key_values` to `cache` (5.x); support both spellings.
        inner = getattr(model, "get_base_model", lambda: model)()  # peft: its base's arguments
        params = inspect.signature(inner.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._keep_arg = "logits_to_keep" in params

    # -- prefill ----------------------------------------------------------------------------

    def start(self, r: Request) -> None:
        """Admission bookkeeping: `r`'s sampler and the weights its keys and values start with."""
        import torch

        if r.sampling.seed is not None:
            r.generator = torch.Generator(device=self.device).manual_seed(r.sampling.seed)
        r.kv_version = self.weights.version
        self.counters.prompt += len(r.prompt)

    def prefill(self, admission: Admission) -> tuple[KV, int]:
        """`admission`'s request prefilled on its own; its keys and values and first token."""
        r = admission.request
        kv, logits = self._prefill(r, admission.cached)
        return kv, self.sample_into(r, logits)

    def _prefill(self, r: Request, cached: CachedPrefix) -> tuple[KV, torch.Tensor]:
        """Keys and values of `r.prompt` (the cached prefix, then a forward pass over the
        rest) and the logits of its last position."""
        import torch

        self.start(r)
        n, reuse = len(r.prompt), cached.length
        if cached.next_logits is not None:  # the same prompt: no forward pass
            assert cached.kv is not None
            self.counters.reused += n
            return cached.kv, cached.next_logits
        cache = _cache(cached.kv)
        scored = r.options.prompt_logprobs  # every position's logits (admitted uncached)
        out = self.forward(
            cache,
            all_logits=scored,
            input_ids=torch.tensor([r.prompt[reuse:]], dtype=torch.long, device=self.device),
            position_ids=torch.arange(reuse, n, device=self.device).view(1, -1),
        )
        kv = _kv_of(cache)
        logits = out.logits[0, -1].float()
        if scored:
            r.prompt_logprobs = prompt_logprobs(out.logits[0], r.prompt)
        self.counters.prefills += 1
        self.counters.computed += n - reuse
        self.counters.reused += reuse
        if self.prefix_cache.enabled:
            # A group's other requests find the whole prompt here, logits included.
            self.prefix_cache.insert(r.prompt, kv, logits)
        return kv, logits

    def forward(self, cache: Any, *, all_logits: bool = False, **inputs: Any) -> Any:
        """A forward pass appending to `cache` (in place); last logits unless `all_logits`."""
        inputs[self._cache_arg] = cache
        if self._keep_arg and not all_logits:
            inputs["logits_to_keep"] = 1  # only the last position is sampled from
        return self.model(use_cache=True, **inputs)

    # -- steps ------------------------------------------------------------------------------

    def execute(self, plan: StepPlan) -> None:
        """Run one step of the running batch as `plan` says."""
        for slot in plan.sitting_out:
            row = self.batch.rows[slot]
            assert row is not None
            row.skipped += 1
            self.counters.sat_out += 1
        if plan.kind is StepKind.MIXED:
            assert plan.newcomer is not None
            self._mixed(plan.newcomer, plan.decode)
        elif plan.kind is StepKind.SUBSET:
            assert plan.decode is not None
            self._subset(plan.decode)
        else:
            self._decode()

    def _decode(self) -> None:
        """Every row gets one token; finished and cancelled rows leave (continuous) or stay
        until the whole batch is done (static)."""
        import torch

        b = self.batch
        assert b.mask is not None and b.pos is not None and b.next is not None
        assert b.slots is not None
        size = len(b.rows)
        mask = torch.cat([b.mask, b.mask.new_ones((size, 1))], 1)
        b.slots.reserve(1)
        cache = _cache(None)
        cache.layers.extend(b.slots.layers())  # written in place, no copy of the past
        out = self.forward(
            cache,
            input_ids=b.next.view(size, 1),
            attention_mask=mask,
            position_ids=b.pos.view(size, 1),
        )
        b.slots.advance(1)
        b.mask = mask
        # A free slot's position stays 0 (models with learned positions have a bound).
        alive = torch.tensor([r is not None for r in b.rows], device=self.device)
        b.pos = (b.pos + 1) * alive
        self.counters.steps += 1
        b.next = self.sample_rows(range(size), out.logits[:, -1, :].float())
        b.leave(self.frees_finished_rows)

    def _subset(self, stepping: Sequence[int]) -> None:
        """A decoding step of the slots `stepping` only (see the module docstring)."""
        import torch

        b = self.batch
        assert b.slots is not None and b.mask is not None
        assert b.pos is not None and b.next is not None
        index = torch.tensor(stepping, dtype=torch.long, device=self.device)
        mask = torch.cat([b.mask, b.mask.new_zeros((len(b.rows), 1))], 1)
        mask[index, -1] = 1
        b.slots.reserve(1)
        cache = _cache(None)
        cache.layers.extend(subset_layers(b.slots, index))
        out = self.forward(
            cache,
            input_ids=b.next[index].view(-1, 1),
            attention_mask=mask[index],
            position_ids=b.pos[index].view(-1, 1),
        )
        b.slots.advance(1)
        b.mask = mask
        b.pos[index] += 1
        self.counters.steps += 1
        b.next = self.sample_rows(stepping, out.logits[:, -1, :].float())
        b.leave(self.frees_finished_rows)
        b.squeeze()

    def _mixed(self, newcomer: Admission, stepping: Sequence[int] | None) -> None:
        """A decoding step that also prefills `newcomer` (see `packed_step`): one packed pass
        over the decoding rows' next tokens and the newcomer's uncached prompt tokens. The
        newcomer takes a free slot, its reused prefix written so that its row ends where the
        others do; it samples its first token from this pass and decodes with the rest from
        the next step on."""
        b, r = self.batch, newcomer.request
        slot = self._seat(newcomer)
        if stepping is None:
            decoding = [i for i, row in enumerate(b.rows) if row is not None]
        else:
            decoding = list(stepping)
        logits = self._packed_pass(newcomer, slot, decoding, stepping is not None)
        next_ids = self.sample_rows(decoding, logits)
        first = self.sample_into(r, logits[-1])
        assert b.slots is not None and b.mask is not None and b.pos is not None
        if self.prefix_cache.enabled:  # a group's other requests find the whole prompt here
            self.prefix_cache.insert(r.prompt, b.slots.row(slot, len(r.prompt)), logits[-1])
        if r.finish is None:
            b.rows[slot] = r
            next_ids[slot] = first
        else:  # done with its first token: the slot stays free
            b.mask[slot] = 0
            b.pos[slot] = 0
        b.next = next_ids
        b.leave(self.frees_finished_rows)
        if stepping is not None:
            b.squeeze()

    def _seat(self, newcomer: Admission) -> int:
        """A free slot for a mixed step's newcomer, its cached prefix written so that its row
        ends where the others do once the step has added its column."""
        b, r = self.batch, newcomer.request
        chunk = len(r.prompt) - newcomer.cached.length
        self.start(r)
        (slot,) = b.free_slots(1)
        b.widen(len(r.prompt) - 1)  # its row, less the column this step adds, must fit
        assert b.slots is not None
        b.slots.reserve(1)
        if newcomer.cached.kv is not None:
            b.slots.write(slot, newcomer.cached.kv, end=b.slots.hi + 1 - chunk)
        return slot

    def _packed_pass(
        self, newcomer: Admission, slot: int, decoding: list[int], fair: bool
    ) -> torch.Tensor:
        """The mixed step's forward pass; the logits of each decoding row, then the
        newcomer's last position. `fair`: rows outside `decoding` sit the step out."""
        import torch

        b, r = self.batch, newcomer.request
        assert b.slots is not None and b.mask is not None
        assert b.pos is not None and b.next is not None
        n, reuse = len(r.prompt), newcomer.cached.length
        chunk = n - reuse
        index = torch.tensor(decoding, dtype=torch.long, device=self.device)
        mask = torch.cat([b.mask, b.mask.new_ones((len(b.rows), 1))], 1)
        if fair:  # the rows sitting this step out: its column is padding
            sitting = [i for i, row in enumerate(b.rows) if row is not None and i not in decoding]
            mask[sitting, -1] = 0
        plan = MixPlan(b.slots, index, slot, reuse, chunk, mask.bool()[:, None, None, :])
        ids = torch.tensor(r.prompt[reuse:], dtype=torch.long, device=self.device)
        positions = torch.arange(reuse, n, device=self.device)
        cache = _cache(None)
        cache.layers.extend(mixed_layers(plan))
        keep = torch.arange(len(decoding) + 1, device=self.device)
        keep[-1] = len(decoding) + chunk - 1  # each decoding row's position, the chunk's last
        with mixed_attention(self.model):
            out = self.model(
                input_ids=torch.cat([b.next[index], ids]).view(1, -1),
                position_ids=torch.cat([b.pos[index], positions]).view(1, -1),
                attention_mask=mask.new_ones((1, 1, 1, 1), dtype=torch.bool),  # unused
                use_cache=True,
                logits_to_keep=keep,
                skyrl_mix=plan,
                **{self._cache_arg: cache},
            )
        b.slots.advance(1)
        mask[slot] = 0
        mask[slot, mask.shape[1] - n :] = 1
        b.mask = mask
        b.pos[index] += 1
        b.pos[slot] = n
        self.counters.steps += 1
        self.counters.mixed += 1
        self.counters.prefills += 1
        self.counters.computed += chunk
        self.counters.reused += reuse
        return out.logits[0].float()

    # -- sampling ---------------------------------------------------------------------------

    def sample_rows(self, rows: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """Each running row of `rows` samples its next token from its line of `logits`;
        finished rows keep their keys and values (`store`). Returns the next input ids."""
        b = self.batch
        assert b.next is not None
        next_ids = b.next.clone()
        for line, row in enumerate(rows):
            r = b.rows[row]
            if r is None or r.done:
                continue
            next_ids[row] = self.sample_into(r, logits[line])
            if r.finish is not None:
                self.store(row, r)
        return next_ids

    def sample_into(self, r: Request, logits: torch.Tensor) -> int:
        """Sample `r`'s next token from `logits`, record it, hand it out, and resolve `r` if
        it is finished."""
        from skyrl_sdk.agents.engine.sampler import sample_top

        allowed = None if r.grammar is None else r.grammar.allowed(logits.shape[-1])
        token, logprob, top = sample_top(logits, r.sampling, r.generator, allowed)
        if r.grammar is not None:
            r.grammar.advance(token)
        if r.options.logprobs is LogprobMode.RAW:  # the model's own distribution (Tinker)
            logprob = raw_logprob(logits, token)
        r.ids.append(token)
        r.logprobs.append(logprob)
        r.versions.append(self.weights.version)
        if r.sampling.top_logprobs:
            r.top.append(top)
        self.counters.generated += 1
        r.emit(token, logprob)
        r.finish = r.finish_reason(self.tokenizer)
        if r.finish is not None:
            r.resolve(r.completion(self.renderer))
        return token

    def store(self, row: int, r: Request) -> None:
        """Keep a finished row's keys and values (its prompt and all but the last sampled
        token) for the next turn, unless new weights were loaded since it started."""
        if not self.prefix_cache.enabled or r.kv_version != self.weights.version:
            return
        b = self.batch
        assert b.slots is not None and b.pos is not None
        # A row that sat steps out has holes in its columns: take only its own.
        kv = b.own_columns(row) if r.skipped else b.slots.row(row, int(b.pos[row]))
        self.prefix_cache.insert([*r.prompt, *r.ids[:-1]], kv)


def check_cache_layers(model: Any) -> None:
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


def raw_logprob(logits: torch.Tensor, token: int) -> float:
    """`token`'s logprob under the untempered distribution of `logits` (`[vocab]`)."""
    import torch

    return float(torch.log_softmax(logits.float(), -1)[token])


def prompt_logprobs(logits: torch.Tensor, prompt: Sequence[int]) -> list[float | None]:
    """The logprob of each of `prompt`'s tokens under the logits of the position before it
    (`logits`: `[len(prompt), vocab]`, one row per prompt position); None for the first."""
    import torch

    ids = torch.tensor(list(prompt[1:]), dtype=torch.long, device=logits.device)
    logp = torch.log_softmax(logits[:-1].float(), -1)
    return [None, *logp.gather(-1, ids[:, None])[:, 0].tolist()]


def _kv_of(cache: Any) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]
