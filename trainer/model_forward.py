"""How the trainer calls a causal LM's forward: the logits of the positions a loss reads.

A small model's step is mostly its vocabulary projection and what follows it (log-softmax,
entropy) at every position, and the forward of prompts every row of a GRPO group repeats. So
`causal_logits` projects only from the first scored position on (transformers'
`logits_to_keep`) and forwards a common prefix once, repeating its keys and values for every
row; `completion_logits` scores one completion without projecting its prompt. Each gives the
logits a full forward would give at those positions (tests: the learner's steps and scores).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

MIN_SHARED_PREFIX = 16
"""Shorter common prefixes are forwarded with their rows (two forwards would cost more)."""


def forward_parameters(model: Any) -> frozenset[str]:
    """The argument names of `model`'s forward (of the model inside its adapters)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return frozenset(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):
        return frozenset()


def keeps_logits(model: Any) -> bool:
    """Whether `model` projects only the positions asked for (`logits_to_keep`, as
    transformers' causal LMs do)."""
    return "logits_to_keep" in forward_parameters(model)


def cache_argument(model: Any) -> str:
    """The name of the forward's KV-cache argument: `cache` in transformers 5,
    `past_key_values` before (deprecated since)."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


def common_prefix(ids: torch.Tensor, attention: torch.Tensor) -> int:
    """How many leading ids every row of `ids` has in common (padding excluded)."""
    same = (ids == ids[:1]).all(dim=0) & (attention != 0).all(dim=0)
    differs = (~same).nonzero()
    return int(differs[0]) if differs.numel() else ids.shape[1]


def shared_prefix(ids: torch.Tensor, attention: torch.Tensor, first: int) -> int:
    """How many leading ids of the right-padded rows `ids` to forward once for all of them
    (`causal_logits`'s `shared`) when logits are needed from position `first` on: their
    common prefix, at most `first` + 1; 0 when shorter than `MIN_SHARED_PREFIX` or for one
    row."""
    if ids.shape[0] < 2:
        return 0
    shared = min(common_prefix(ids, attention), first + 1)
    return shared if shared >= MIN_SHARED_PREFIX else 0


def causal_logits(
    model: Any,
    ids: torch.Tensor,
    attention: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    *,
    first: int = 0,
    shared: int = 0,
    cache_name: str = "past_key_values",
) -> torch.Tensor:
    """`model`'s logits at positions `first` on (`[B, T - first, V]`; 0: all of them) for
    right-padded rows `ids`. `position_ids`: packed rows, whose positions restart per
    sequence; `shared` > 0: every row's first `shared` ids are the same (and `shared` <=
    `first` + 1), forwarded once. `first` > 0 needs a model that `keeps_logits`."""
    if shared:
        return _shared_prefix_logits(model, ids, attention, first, shared, cache_name)
    kept = {"logits_to_keep": ids.shape[1] - first} if first else {}
    if position_ids is None:
        return model(input_ids=ids, attention_mask=attention, **kept).logits
    # Packed rows: transformers makes the causal mask block-diagonal from position ids that
    # restart, but only with no 2D mask and no KV cache (`trainer.packing`).
    return model(input_ids=ids, position_ids=position_ids, use_cache=False, **kept).logits


def _shared_prefix_logits(
    model: Any, ids: torch.Tensor, attention: torch.Tensor, first: int, shared: int, name: str
) -> torch.Tensor:
    """`causal_logits` with the common prefix forwarded once: its keys and values are
    repeated for every row and the rows' own ids attend to them. Gradients flow back through
    the repeat into the one prefix forward, so a step is the row-by-row one."""
    rows, width = ids.shape
    prefix = model(input_ids=ids[:1, :shared], use_cache=True, logits_to_keep=1)
    cache = getattr(prefix, name)
    cache.batch_repeat_interleave(rows)
    rest = model(
        input_ids=ids[:, shared:],
        attention_mask=attention,
        use_cache=True,
        logits_to_keep=width - max(first, shared),
        **{name: cache},
    ).logits
    if first < shared:  # first == shared - 1: the prefix's last position predicts a scored id
        rest = torch.cat([prefix.logits.expand(rows, -1, -1), rest], dim=1)
    return rest


def completion_logits(model: Any, ids: torch.Tensor, completion: int, keeps: bool) -> torch.Tensor:
    """The logits that score the last `completion` ids of the one row `ids` (`[1, completion,
    V]`); with `keeps` (`keeps_logits`), the prompt's positions are never projected."""
    kept = {"logits_to_keep": completion + 1} if keeps else {}
    return model(input_ids=ids, **kept).logits[:, -completion - 1 : -1]
