"""How the trainer calls a causal LM's forward: the logits of the positions a loss reads.

A small model's step is mostly its vocabulary projection and what follows it (log-softmax,
entropy) at every position, and the forward of prompts every row of a GRPO group repeats. So
`causal_logits` projects only from the first scored position on (transformers'
`logits_to_keep`) and forwards a common prefix once, repeating its keys and values for every
row; `score_pairs` scores (prompt, completion) pairs in padded batches that way, without
projecting the prompts. Each gives the logits a full forward would give at those positions
(tests: the learner's steps and scores).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ScoredCompletion:
    """One completion as a model scores it (`score_pairs`)."""

    logprobs: tuple[float, ...]
    """Each completion token's logprob given everything before it (raw logits)."""
    top_ids: tuple[tuple[int, ...], ...] = ()
    """Per completion token, the model's `top_k` most likely ids at its position, most likely
    first (empty when no `top_k` was asked for)."""
    top_logprobs: tuple[tuple[float, ...], ...] = ()
    """Their logprobs, aligned with `top_ids`."""


def score_pairs(
    model: Any,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    batch_size: int,
    top_k: int = 0,
) -> list[ScoredCompletion]:
    """Each (prompt, completion)'s token logprobs under `model` (no gradient; the caller sets
    eval mode), `batch_size` right-padded rows a forward: logits only from the shortest
    prompt's last position on, and a prompt the rows share (a GRPO group's) forwarded once.
    With `top_k` > 0 also the `top_k` most likely ids and their logprobs at each completion
    token's position."""
    from skyrl_sdk.trainer.losses import token_logprobs

    keeps, cache_name = keeps_logits(model), cache_argument(model)
    device = next(model.parameters()).device
    out: list[ScoredCompletion] = []
    for start in range(0, len(pairs), batch_size):
        chunk = [(list(p), list(c)) for p, c in pairs[start : start + batch_size]]
        if any(not p or not c for p, c in chunk):
            raise ValueError("scoring needs a non-empty prompt and completion")
        width = max(len(p) + len(c) for p, c in chunk)
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        attention = torch.zeros_like(ids)
        for row, (p, c) in enumerate(chunk):
            ids[row, : len(p) + len(c)] = torch.tensor(p + c)
            attention[row, : len(p) + len(c)] = 1
        ids, attention = ids.to(device), attention.to(device)
        first = min(len(p) for p, _ in chunk) - 1 if keeps else 0
        shared = shared_prefix(ids, attention, first) if first else 0
        with torch.no_grad():  # right padding: no real token attends to it
            logits = causal_logits(
                model, ids, attention, first=first, shared=shared, cache_name=cache_name
            )[:, :-1].float()
            logprobs = token_logprobs(logits, ids[:, first + 1 :])
            top = _top_k(logits, top_k) if top_k else None
        for row, (p, c) in enumerate(chunk):
            at = slice(len(p) - 1 - first, len(p) - 1 - first + len(c))
            if top is None:
                out.append(ScoredCompletion(tuple(logprobs[row, at].tolist())))
                continue
            out.append(
                ScoredCompletion(
                    tuple(logprobs[row, at].tolist()),
                    tuple(map(tuple, top[0][row, at].tolist())),
                    tuple(map(tuple, top[1][row, at].tolist())),
                )
            )
    return out


def _top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` most likely ids per position of `logits` (`[B, T, V]`) and their logprobs."""
    values, ids = logits.topk(min(k, logits.shape[-1]), dim=-1)
    return ids, values - torch.logsumexp(logits, dim=-1, keepdim=True)
