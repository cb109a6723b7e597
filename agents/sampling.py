"""Temperature, top-k and top-p (nucleus) sampling from logits: the one sampler of the SDK.

`LocalEngine` and the Tinker server's sampler both draw tokens here, so a seed and a set of
sampling parameters mean the same distribution in either. Top-p follows the usual definition
(vLLM, transformers): keep the smallest set of most likely tokens whose cumulative probability
reaches `top_p`, and always at least the most likely token.

torch is imported by this module; import it lazily from modules that must load without torch.
"""

from __future__ import annotations

import torch


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
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # Mass strictly before each token (an exclusive cumsum, exact for the first ones):
        # a token is dropped once the tokens before it already reach top_p.
        before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
        drop = before >= top_p
        drop[..., 0] = False  # the most likely token is always kept
        drop_unsorted = torch.zeros_like(drop).scatter(-1, order, drop)
        out = out.masked_fill(drop_unsorted, float("-inf"))
    return out


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
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
