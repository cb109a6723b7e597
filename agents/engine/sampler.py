"""Temperature, top-k and top-p (nucleus) sampling from logits: the one sampler of the SDK.

The engine's runner and the Tinker server's sampler both draw tokens here, so a seed and a
set of sampling parameters mean the same distribution in either. `sample_top` is what the
runner asks per row: one token, its logprob and the most likely alternatives. Top-p follows the usual definition
(vLLM, transformers): keep the smallest set of most likely tokens whose cumulative probability
reaches `top_p`, and always at least the most likely token.

torch is imported by this module; import it lazily from modules that must load without torch.
"""

from __future__ import annotations

from math import inf
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from skyrl_sdk.agents.policy import SamplingParams


def truncate(logits: torch.Tensor, *, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """`logits` (`[..., vocab]`) with the tokens outside the top-k / top-p sets at `-inf`.

    `top_k <= 0` and `top_p >= 1` turn the respective filter off. Top-k keeps every token tied
    with the k-th largest logit. Top-p is applied after top-k, on the renormalised remainder.
    """
    out = logits
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        out = _nucleus(out, top_p)
    return out


NUCLEUS_CANDIDATES = 1024
"""Top-p first looks for the nucleus among this many most likely tokens (see `_nucleus`)."""


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """`logits` with the tokens outside the top-p set at `-inf`.

    Sorting a 49k vocabulary costs ~4 ms a token on CPU. The nucleus of a sampling
    distribution is nearly always among its few hundred most likely tokens, so those are
    found with `topk` (sorted too) and the whole sort runs only when their mass falls short of
    `top_p` in some row. The kept set is the same either way (ties aside, which any sort
    orders arbitrarily): every token past the candidates has at least their mass before it.
    """
    few = logits.shape[-1] > NUCLEUS_CANDIDATES
    if few:
        values, order = torch.topk(logits, NUCLEUS_CANDIDATES, dim=-1)
        cumulative = torch.softmax(logits, dim=-1).gather(-1, order).cumsum(dim=-1)
    if not few or not bool((cumulative[..., -1] >= top_p).all()):
        values, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = torch.softmax(values, dim=-1).cumsum(dim=-1)
    # Mass strictly before each token (an exclusive cumsum, exact for the first ones): a token
    # is dropped once the tokens before it already reach top_p.
    before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    drop = before >= top_p
    drop[..., 0] = False  # the most likely token is always kept
    kept = values.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, kept)


def sample(
    logits: torch.Tensor,
    *,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw one token id per row of `logits` (`[vocab]` -> `[]`, `[batch, vocab]` -> `[batch]`).

    `temperature <= 0` is greedy (argmax, no random draw). Otherwise the logits are divided by
    the temperature, truncated by `truncate`, and one id is drawn with `generator`.
    """
    if temperature <= 0:
        return logits.argmax(dim=-1)
    return draw(logits / temperature, top_k=top_k, top_p=top_p, generator=generator)


def draw(
    scaled: torch.Tensor,
    *,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """`sample` for logits already divided by a positive temperature (callers that also need
    the scaled distribution's logprobs compute it once)."""
    probs = torch.softmax(truncate(scaled, top_k=top_k, top_p=top_p), dim=-1)
    if probs.dim() == 1 and probs.shape[0] > 4 * HEAD:
        return _draw_head_first(probs, generator)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


HEAD = 64
"""`draw` races exponentials among this many most likely tokens (see `_draw_head_first`)."""


def _draw_head_first(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One id from `probs` (`[vocab]`), exactly distributed, without a random number per
    token of the vocabulary: with probability equal to the mass outside the `HEAD` most likely
    tokens, draw from those (multinomial); otherwise race exponentials among the head (token
    i wins with probability p_i / head mass). Over SmolLM2's 49k vocabulary this costs ~0.1 ms
    plus 1 ms times the tail's mass, against 1 ms for `torch.multinomial`. Both stages keep a
    draw in place when float rounding moves the logits a little (inverse-CDF sampling over the
    whole vocabulary does not: every boundary of its cumulative sum drifts)."""
    head_p, head_ids = torch.topk(probs, HEAD)
    rest = probs.clone()
    rest[head_ids] = 0.0
    tail = float(rest.sum(dtype=torch.float64))
    total = tail + float(head_p.sum(dtype=torch.float64))
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    if u * total < tail:
        return torch.multinomial(rest, 1, generator=generator).squeeze(-1)
    race = torch.empty(HEAD, dtype=torch.float64).exponential_(generator=generator)
    return head_ids[torch.argmax(head_p.to(torch.float64) / race)]


def sample_top(
    logits: torch.Tensor,
    sampling: SamplingParams,
    generator: torch.Generator | None,
    allowed: torch.Tensor | None = None,
) -> tuple[int, float, tuple[tuple[int, float], ...]]:
    """`_sample`, plus the `sampling.top_logprobs` most likely alternatives under the same
    distribution (most likely first). `allowed` (`[vocab]` bools, a grammar's mask:
    `constraints`) removes the other ids first: the token, its logprob and the alternatives
    are then those of the masked, renormalised distribution."""
    if allowed is not None:
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
    if sampling.temperature <= 0:
        token = int(sample(logits, temperature=0.0))
        logp = torch.log_softmax(logits, -1)
    else:
        scaled = logits / sampling.temperature
        token = int(draw(scaled, top_k=sampling.top_k, top_p=sampling.top_p, generator=generator))
        logp = torch.log_softmax(scaled, -1)
    top: tuple[tuple[int, float], ...] = ()
    if sampling.top_logprobs:
        values, ids = torch.topk(logp, min(sampling.top_logprobs, logp.shape[-1]))
        # A mask may leave fewer ids than asked for: the others have no probability.
        top = tuple((i, v) for i, v in zip(ids.tolist(), values.tolist(), strict=True) if v > -inf)
    return token, float(logp[token]), top


def _sample(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[int, float]:
    """Sample one id; return it with its log-probability under the sampling distribution
    (temperature applied; before top-k/top-p truncation, as vLLM reports it)."""
    token, logprob, _ = sample_top(logits, sampling, generator)
    return token, logprob
