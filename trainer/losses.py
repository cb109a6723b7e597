"""Token-level policy losses, their reductions, KL penalties and entropy.

Every loss takes per-token tensors of shape `[batch, tokens]` and a `mask` (1 on tokens the
policy generated, 0 on prompt, observation and padding tokens), and returns a scalar plus
statistics. Log-probabilities are of the sampled tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The enums live with the config, which must load without torch; they are re-exported here
# so that `losses.Reduction` and `losses.KLEstimator` are the very same classes.
from skyrl_sdk.trainer.config import KLEstimator, Reduction

__all__ = ["KLEstimator", "Reduction"]


@dataclass(frozen=True)
class PolicyLossStats:
    """Diagnostics of one policy-loss evaluation (masked token averages)."""

    clip_fraction: float
    """Share of tokens whose ratio was clipped (PPO) or whose IS weight hit its cap."""
    ratio_mean: float
    """Mean of `exp(logp - old_logp)` over generated tokens."""
    dual_clip_fraction: float = 0.0
    """Share of negative-advantage tokens held by the dual clip."""


def reduce(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    reduction: Reduction,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Reduce a `[batch, tokens]` loss over the masked tokens."""
    mask = mask.to(per_token.dtype)
    if reduction is Reduction.TOKEN_MEAN:
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if reduction is Reduction.SEQUENCE_MEAN:
        per_sequence = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_sequence.mean()
    if normalizer is None or normalizer <= 0:
        raise ValueError(
            "Reduction.CONSTANT needs a positive normalizer (e.g. the max generation length)"
        )
    return (per_token * mask).sum() / (normalizer * per_token.shape[0])


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    mask = mask.to(x.dtype)
    return float((x * mask).sum() / mask.sum().clamp(min=1.0))


def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    low: float | torch.Tensor,
    high: float | torch.Tensor,
) -> torch.Tensor:
    """PPO's per-token clipped surrogate loss `-min(r * A, clamp(r, low, high) * A)`.

    `low` and `high` bound the ratio itself (e.g. 0.8 and 1.2), as numbers or per-token
    tensors. Shared by `ppo_clip_loss` and the Tinker server's `ppo` and `gspo` losses.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, low, high)
    return torch.maximum(unclipped, clipped)


def importance_sampling_per_token(
    logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """Per-token off-policy REINFORCE loss `-exp(logp - sampler_logp) * A`.

    Shared by `importance_sampling_loss` and the Tinker server's `importance_sampling` loss.
    """
    return -torch.exp(logprobs - sampler_logprobs) * advantages


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    reduction: Reduction = Reduction.TOKEN_MEAN,
    normalizer: float | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """PPO's clipped surrogate, with asymmetric clipping ("clip-higher") and dual clip.

    `advantages` is `[batch, tokens]` or `[batch]` (broadcast over tokens). For negative
    advantages, `dual_clip` (c > 1) caps the loss at `-c * A` so a huge ratio on a bad token
    cannot blow up the update. `is_weights` (detached) multiply the per-token loss: truncated
    importance sampling for tokens that an older policy version generated.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    ratio = torch.exp(logprobs - old_logprobs)
    per_token = clipped_surrogate(ratio, advantages, 1.0 - clip_low, 1.0 + clip_high)
    # the maximum exceeds the unclipped term exactly where the clipped one won
    clip_hit = (per_token > -advantages * ratio).to(logprobs.dtype)
    dual_hit = torch.zeros_like(per_token)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError("dual_clip must be > 1")
        capped = torch.minimum(per_token, -advantages * dual_clip)
        negative = advantages < 0
        dual_hit = (negative & (capped < per_token)).to(logprobs.dtype)
        per_token = torch.where(negative, capped, per_token)
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    loss = reduce(per_token, mask, reduction, normalizer)
    with torch.no_grad():
        stats = PolicyLossStats(
            clip_fraction=_masked_mean(clip_hit, mask),
            ratio_mean=_masked_mean(ratio, mask),
            dual_clip_fraction=_masked_mean(dual_hit, mask),
        )
    return loss, stats


def importance_sampling_loss(
    logprobs: torch.Tensor,
    sampler_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    reduction: Reduction = Reduction.TOKEN_MEAN,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Off-policy REINFORCE: `-(exp(logp - sampler_logp) * A)` per token, unclipped.

    The gradient is `-w * A * grad(logp)` with `w` the importance ratio to the sampler, the
    policy-gradient estimator for data from another policy (Tinker's `importance_sampling`).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    per_token = importance_sampling_per_token(logprobs, sampler_logprobs, advantages)
    loss = reduce(per_token, mask, reduction, normalizer)
    with torch.no_grad():
        ratio = torch.exp(logprobs - sampler_logprobs)
        stats = PolicyLossStats(clip_fraction=0.0, ratio_mean=_masked_mean(ratio, mask))
    return loss, stats


def truncated_is_weights(
    proximal_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float = 2.0
) -> tuple[torch.Tensor, float]:
    """Truncated importance-sampling weights `min(exp(proximal - sampler), cap)`, detached.

    Tokens generated by an older policy version (async training) or by an engine whose numerics
    differ from the learner's are re-weighted toward the policy being updated; the cap bounds
    the variance. Returns the weights and the share of tokens at the cap.
    """
    if cap <= 0:
        raise ValueError("cap must be positive")
    raw = torch.exp((proximal_logprobs - sampler_logprobs).detach())
    weights = torch.clamp(raw, max=cap)
    return weights, float((raw > cap).to(torch.float32).mean())


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator
) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate from the sampled tokens."""
    log_ratio = logprobs - ref_logprobs
    if estimator is KLEstimator.K1:
        return log_ratio
    # k3 = r - log r - 1 with r = q/p = exp(-log_ratio); clamp keeps exp finite.
    neg = (-log_ratio).clamp(min=-20.0, max=20.0)
    return torch.exp(neg) - neg - 1.0


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the softmax distribution, `[..., vocab] -> [...]`."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of `token_ids` under `logits` (`[B, T, V]`, `[B, T]` -> `[B, T]`).

    Computed as `logit[id] - logsumexp(logits)` so no `[B, T, V]` log-softmax is materialised.
    """
    logits = logits.float()
    picked = logits.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)
