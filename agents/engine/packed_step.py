"""One forward pass that decodes the running batch and prefills a newcomer (`LocalEngine`).

Without it, a request that joins a running batch is prefilled on its own first, and every
running row waits for that pass: with 8 multi-turn episodes in flight, a turn ends every few
steps and each new turn's prefill (its observation, tens of tokens) stalls the other seven.
A *mixed step* packs both into one sequence instead: the running rows' next tokens (one per
row), then the newcomer's uncached prompt tokens. The linear layers see one matrix of
`rows + chunk` rows, so the decoding step rides along with the prefill for little more than
the prefill's cost; only attention is done per part, here:

- the decoding rows attend to their own slot of `kv_slots` (padding masked), exactly as a
  plain decoding step does (the query heads of a key/value group stacked, as transformers'
  SDPA path does for one query);
- the newcomer's chunk attends causally to its slot, where its reused prefix was written
  first, right-aligned so that the row ends with the others.

The pass runs under transformers' attention interface: `MIXED_ATTENTION` is registered as an
attention implementation that, given a `MixPlan` (the `skyrl_mix` keyword the engine passes
through the model), does the above, and without one is plain SDPA. Models qualify when their
attention layers call `cache.update` and the configured attention function (transformers'
Llama, Qwen2/3, Mistral and most decoder-only models do).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from skyrl_sdk.agents.engine.kv_slots import KVSlots

MIXED_ATTENTION = "skyrl_mixed_sdpa"
"""The attention implementation name the mixed step switches the model to."""
MAX_MIXED_CHUNK = 512
"""Newcomers with more uncached prompt tokens than this are prefilled on their own."""


@dataclass(frozen=True, eq=False)
class MixPlan:
    """Where each part of a mixed step's packed sequence goes."""

    slots: KVSlots
    """The running batch's keys and values; the step writes column `hi` of every decoding
    row and columns `hi + 1 - chunk ... hi` of the newcomer's slot."""
    decoding: torch.Tensor
    """Slots of the decoding rows, in packed order (the first `len(decoding)` tokens)."""
    slot: int
    """The newcomer's slot."""
    prefix: int
    """The newcomer's reused prefix length (already written before its chunk)."""
    chunk: int
    """The newcomer's tokens in this pass (the last `chunk` packed tokens)."""
    mask: torch.Tensor
    """`[slots, 1, 1, width + 1]` bool: the columns each slot's decoding query may see."""


def _attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    skyrl_mix: MixPlan | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """`MIXED_ATTENTION`: SDPA for a mixed step's two parts (see the module docstring), plain
    SDPA for any other pass of the model."""
    import torch
    from torch.nn import functional
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if skyrl_mix is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    plan, s = skyrl_mix, skyrl_mix.slots
    # `key`/`value` are the layer's whole buffers (see `MixedLayer.update`).
    keys, values = key[:, :, s.lo : s.hi + 1], value[:, :, s.lo : s.hi + 1]
    heads, groups = query.shape[1], key.shape[1]
    n_dec = plan.decoding.numel()
    # Decoding rows: one query each; every slot gets one (zeros where none) so that the
    # batch's buffers are used as views, and a key/value group's query heads are stacked.
    q = query.new_zeros((keys.shape[0], heads, query.shape[-1]))
    q[plan.decoding] = query[0, :, :n_dec].transpose(0, 1)
    q = q.view(keys.shape[0], groups, heads // groups, query.shape[-1])
    out = functional.scaled_dot_product_attention(q, keys, values, plan.mask, scale=scaling)
    decoded = out.reshape(keys.shape[0], heads, -1)[plan.decoding]  # [n_dec, heads, dim]
    # The newcomer: its chunk against its prefix and itself, causally.
    n = plan.prefix + plan.chunk
    k_new = key[plan.slot : plan.slot + 1, :, s.hi + 1 - n : s.hi + 1]
    v_new = value[plan.slot : plan.slot + 1, :, s.hi + 1 - n : s.hi + 1]
    causal = torch.ones((plan.chunk, n), dtype=torch.bool, device=query.device).tril(plan.prefix)
    prefilled = functional.scaled_dot_product_attention(
        query[:, :, n_dec:], k_new, v_new, causal, scale=scaling, enable_gqa=True
    )  # [1, heads, chunk, dim]
    packed = torch.cat([decoded.unsqueeze(0), prefilled.transpose(1, 2)], 1)
    return packed, None  # [1, n_dec + chunk, heads, dim], as transformers expects


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(MIXED_ATTENTION, _attention)
    AttentionMaskInterface.register(MIXED_ATTENTION, sdpa_mask)


def supports_mixed_steps(model: Any) -> bool:
    """Whether `model` runs its attention through transformers' SDPA interface (the one the
    mixed step swaps for a moment)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa"


@contextlib.contextmanager
def mixed_attention(model: Any) -> Iterator[None]:
    """The model's attention is `MIXED_ATTENTION` inside (plain SDPA without a plan, so a
    pass of the same model in another thread meanwhile computes what it would have)."""
    _register()
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = MIXED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


def mixed_layers(plan: MixPlan) -> list[Any]:
    """transformers cache layers over `plan.slots` for one mixed step."""
    cls = _mixed_layer_class()
    return [cls(plan, i) for i in range(plan.slots.num_layers)]


@functools.cache
def _mixed_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class MixedLayer(DynamicLayer):
        """One layer of a mixed step: writes the packed keys and values where they belong
        and hands the attention the layer's whole buffers."""

        def __init__(self, plan: MixPlan, index: int):
            super().__init__()
            self._plan, self._index = plan, index
            k_buf, v_buf = plan.slots.buffers(index)
            self.device, self.keys, self.values = k_buf.device, k_buf, v_buf
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            plan, hi = self._plan, self._plan.slots.hi
            n_dec = plan.decoding.numel()
            for buf, new in ((self.keys, key_states), (self.values, value_states)):
                buf[plan.decoding, :, hi] = new[0, :, :n_dec].transpose(0, 1)
                buf[plan.slot, :, hi + 1 - plan.chunk : hi + 1] = new[0, :, n_dec:]
            return self.keys, self.values

    return MixedLayer
