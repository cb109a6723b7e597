"""Scoring on the engine: each completion token's logprob, computed as a rollout computes it.

`LocalEngine.score(prompt_ids, completion_ids)` (the engine's `agents.scoring.Scorer`) runs
`score_on_worker` on the engine's worker thread between two steps (`WeightSync.
at_loaded_weights`), so it sees the weights and the prefix cache a request admitted then
would. It takes the keys and values of the longest cached prefix of the prompt from the
prefix cache, exactly as a prefill does (`PrefixCache.reusable`), computes the rest of the
sequence over them, and reads every completion position's logits: a prefix cache holding keys
and values of older weights (SkyRL #2246) gives different logprobs than the learner's, which
is what the trainer's sync check looks for. The sequence's keys and values then go into the
cache (as a finished rollout's do), so the prompt is cached at this version when the next
weights arrive.

Logprobs are the model's own distribution (`log_softmax` of the raw logits, no temperature).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.engine.prefix_cache import KV, PrefixCache

if TYPE_CHECKING:
    from skyrl_sdk.agents.engine.runner import ModelRunner


def score_on_worker(
    runner: ModelRunner,
    prefix_cache: PrefixCache,
    prompt: Sequence[int],
    completion: Sequence[int],
) -> list[float]:
    """The logprob of each of `completion`'s tokens after `prompt` and the completion tokens
    before it, under the loaded weights (the worker thread only; see the module docstring)."""
    import torch

    if not prompt or not completion:
        raise ValueError("scoring needs a non-empty prompt and completion")
    sequence = [*prompt, *completion]
    n, start = len(sequence), len(prompt) - 1  # position `start` predicts completion[0]
    cached = prefix_cache.reusable(sequence)
    # Positions from `start` on need their logits: reuse at most the prompt less its last token.
    reuse = min(cached.length, start)
    past = None
    if reuse and cached.kv is not None:
        past = [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in cached.kv]
    cache = _dynamic_cache(past)
    out = runner.forward(
        cache,
        all_logits=True,
        input_ids=torch.tensor([sequence[reuse:]], dtype=torch.long, device=runner.device),
        position_ids=torch.arange(reuse, n, device=runner.device).view(1, -1),
    )
    runner.counters.computed += n - reuse
    runner.counters.reused += reuse
    logits = out.logits[0, start - reuse : n - 1 - reuse].float()
    ids = torch.tensor(list(completion), dtype=torch.long, device=logits.device)
    logprobs = torch.log_softmax(logits, -1).gather(-1, ids[:, None])[:, 0]
    if prefix_cache.enabled:  # as a finished rollout: the sequence less its last token
        kv = [(layer.keys[:, :, : n - 1], layer.values[:, :, : n - 1]) for layer in cache.layers]
        prefix_cache.insert(sequence[:-1], kv)
    return logprobs.tolist()


def _dynamic_cache(kv: KV | None) -> Any:
    """A transformers `DynamicCache` holding `kv` (its tensors, not copies)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = DynamicCache()
    for k, v in kv or ():
        layer = DynamicLayer()
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
        cache.layers.append(layer)
    return cache
