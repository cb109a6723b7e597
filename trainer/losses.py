"""The one policy-loss catalogue, plus reductions, KL penalties and entropy.

Both the RL trainer (`algorithm.loss`) and the Tinker-compatible server (`forward_backward`'s
`loss_fn`) compute their policy losses here, under Tinker's names (`PolicyLoss`):

| loss | per-token loss (summed or reduced by the caller) |
|---|---|
| `cross_entropy` | `-A * logp` (Tinker's `weights` are the `A`) |
| `importance_sampling` | `-r * A`, `r = exp(logp - old)` |
| `ppo` | `max(-r * A, -clip(r, lo, hi) * A)`, optionally capped at `-c * A` for `A < 0` |
| `cispo` | `-sg(clip(r, lo, hi)) * logp * A` |
| `dro` | `-(logp * A - beta / 2 * (logp - old)^2)` |
| `gspo` | PPO's surrogate on the sequence ratio `exp(mean(logp - old))` (GSPO-token) |

Every loss is a small function `(logprobs, old_logprobs, advantages, mask, config) ->
LossTerms` over `[batch, tokens]` tensors: `logprobs` are the learner's log-probabilities of the
sampled tokens (with gradient), `old_logprobs` those of the policy the ratio is taken to,
`advantages` one weight per token, `mask` 1 on the tokens the policy generated. The per-token
loss comes back unmasked and unreduced: Tinker sums it, the trainer reduces it (`reduce`).
`LOSSES` maps each name to its function and config type; `loss_spec(name)` looks one up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

# The enums live with the config, which must load without torch; they are re-exported here
# so that `losses.Reduction`, `losses.KLEstimator` and `losses.PolicyLoss` are the very same
# classes.
from skyrl_sdk.trainer.config import AlgorithmConfig, KLEstimator, PolicyLoss, Reduction

__all__ = ["KLEstimator", "PolicyLoss", "Reduction"]

Threshold = float | torch.Tensor
"""A clip bound on the ratio itself (e.g. 0.8): one number, or one per token."""


# -- configs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossEntropyConfig:
    """`cross_entropy` has no settings."""


@dataclass(frozen=True)
class ImportanceSamplingConfig:
    """`importance_sampling` has no settings (the ratio is unclipped)."""


@dataclass(frozen=True)
class ClipConfig:
    """The ratio bounds of `cispo` and `gspo` (Tinker's `loss_fn_config` keys)."""

    clip_low_threshold: Threshold = 0.8
    """Lower bound of the ratio (Tinker's default, 1 - 0.2)."""
    clip_high_threshold: Threshold = 1.2
    """Upper bound of the ratio (Tinker's default, 1 + 0.2)."""


@dataclass(frozen=True)
class PPOConfig(ClipConfig):
    """`ppo`: the ratio bounds, and the trainer's optional dual clip (Tinker has none)."""

    dual_clip: float | None = None
    """For negative advantages, cap the loss at `-dual_clip * A` (> 1; None: off), so a huge
    ratio on a bad token cannot blow up the update."""

    def __post_init__(self) -> None:
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {self.dual_clip}")


@dataclass(frozen=True)
class DROConfig:
    """`dro`: the weight of the quadratic penalty on the log-ratio."""

    beta: float
    """Penalty weight (no documented default: it must be given)."""


@dataclass(frozen=True)
class GSPOConfig(ClipConfig):
    """`gspo`: the ratio bounds, and which tokens make up each sequence's ratio."""

    sequence_ratio_mask: torch.Tensor | None = None
    """`[batch, tokens]`, nonzero on the tokens averaged into the sequence ratio (Tinker's
    `sequence_ratio_mask` input); None: the loss mask."""


LossConfig = (
    CrossEntropyConfig | ImportanceSamplingConfig | PPOConfig | ClipConfig | DROConfig | GSPOConfig
)
"""Any loss's settings."""


@dataclass(frozen=True)
class LossTerms:
    """What one loss computed, per token (unmasked: the caller masks and reduces)."""

    per_token: torch.Tensor
    """`[batch, tokens]` loss to minimise (the negative of Tinker's objective)."""
    ratio: torch.Tensor | None = None
    """The ratio the loss saw per token (None: the loss has no ratio)."""
    clipped: torch.Tensor | None = None
    """Bool per token: a clip bound held the ratio (its gradient is stopped or constant)."""
    dual_clipped: torch.Tensor | None = None
    """Bool per token: the dual clip capped the loss (`ppo` with `dual_clip`)."""


# -- the losses ----------------------------------------------------------------------------


def cross_entropy(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: CrossEntropyConfig,
) -> LossTerms:
    """Weighted negative log-likelihood `-A * logp` (Tinker's `weights` are `advantages`).

    With the advantages as weights this is on-policy REINFORCE; `old_logprobs` are unused.
    """
    return LossTerms(per_token=-advantages * logprobs)


def importance_sampling(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: ImportanceSamplingConfig,
) -> LossTerms:
    """Off-policy REINFORCE `-exp(logp - old) * A`, unclipped (`old`: the sampler's).

    The gradient is `-r * A * grad(logp)`, the policy gradient for data from another policy.
    """
    old = _required(old_logprobs, PolicyLoss.IMPORTANCE_SAMPLING)
    ratio = torch.exp(logprobs - old)
    return LossTerms(per_token=-ratio * advantages, ratio=ratio.detach())


def ppo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PPOConfig,
) -> LossTerms:
    """PPO's clipped surrogate `max(-r * A, -clip(r, lo, hi) * A)`, with an optional dual clip.

    Asymmetric bounds give DAPO's "clip-higher".
    """
    old = _required(old_logprobs, PolicyLoss.PPO)
    ratio = torch.exp(logprobs - old)
    per_token = _clipped_surrogate(ratio, advantages, config)
    # the maximum exceeds the unclipped term exactly where the clipped one won
    clipped = per_token.detach() > (-advantages * ratio).detach()
    dual = torch.zeros_like(clipped)
    if config.dual_clip is not None:
        capped = torch.minimum(per_token, -advantages * config.dual_clip)
        negative = advantages < 0
        dual = negative & (capped < per_token).detach()
        per_token = torch.where(negative, capped, per_token)
    return LossTerms(per_token, ratio.detach(), clipped, dual)


def cispo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: ClipConfig,
) -> LossTerms:
    """CISPO `-sg(clip(r, lo, hi)) * logp * A`: the clipped ratio is a constant weight, so
    clipped tokens still get a gradient (PPO's clip drops theirs)."""
    old = _required(old_logprobs, PolicyLoss.CISPO)
    ratio = torch.exp(logprobs - old).detach()
    weight = torch.clamp(ratio, config.clip_low_threshold, config.clip_high_threshold)
    return LossTerms(
        per_token=-weight * logprobs * advantages, ratio=ratio, clipped=weight != ratio
    )


def dro(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: DROConfig,
) -> LossTerms:
    """DRO `-(logp * A - beta / 2 * (logp - old)^2)`: REINFORCE with a quadratic pull toward
    the policy that sampled (`old`)."""
    old = _required(old_logprobs, PolicyLoss.DRO)
    per_token = -(logprobs * advantages - 0.5 * config.beta * (logprobs - old) ** 2)
    return LossTerms(per_token=per_token, ratio=torch.exp(logprobs - old).detach())


def gspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: GSPOConfig,
) -> LossTerms:
    """GSPO-token: PPO's surrogate where every token's ratio has its sequence's value (the
    geometric mean of the token ratios over `sequence_ratio_mask`) and its own gradient."""
    old = _required(old_logprobs, PolicyLoss.GSPO)
    in_ratio = config.sequence_ratio_mask
    in_ratio = mask if in_ratio is None else (in_ratio != 0).to(mask.dtype) * mask
    log_ratio = ((logprobs.detach() - old) * in_ratio).sum(-1) / in_ratio.sum(-1).clamp(min=1)
    ratio = torch.exp(log_ratio[:, None] + logprobs - logprobs.detach())
    per_token = _clipped_surrogate(ratio, advantages, config)
    clipped = per_token.detach() > (-advantages * ratio).detach()
    return LossTerms(per_token, ratio.detach(), clipped)


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, config: ClipConfig
) -> torch.Tensor:
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(
        ratio, config.clip_low_threshold, config.clip_high_threshold
    )
    return torch.maximum(unclipped, clipped)


def _required(old_logprobs: torch.Tensor | None, loss: PolicyLoss) -> torch.Tensor:
    if old_logprobs is None:
        raise ValueError(f"loss {loss.value!r} needs old_logprobs")
    return old_logprobs


# -- the registry --------------------------------------------------------------------------


class OldPolicy(Enum):
    """Which logprobs the trainer's learner passes as `old_logprobs`."""

    SAMPLER = "sampler"
    """The sampler's: the loss corrects for off-policy data itself."""
    PROXIMAL = "proximal"
    """The learner's before this batch's first update (decoupled PPO); tokens an older policy
    sampled are re-weighted by truncated importance sampling (`truncated_is_weights`)."""


LossFunction = Callable[
    [torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, Any], LossTerms
]
"""`(logprobs, old_logprobs, advantages, mask, config) -> LossTerms`."""


@dataclass(frozen=True)
class LossSpec:
    """One entry of the catalogue."""

    name: PolicyLoss
    """The loss's (Tinker's) name."""
    fn: LossFunction
    """The per-token loss."""
    config_type: type
    """The frozen dataclass of its settings."""
    old_policy: OldPolicy = OldPolicy.PROXIMAL
    """What the trainer's learner passes as `old_logprobs`."""
    tinker_config: tuple[str, ...] = field(default=())
    """The `loss_fn_config` keys Tinker accepts for it."""


_CLIP_KEYS = ("clip_low_threshold", "clip_high_threshold")

LOSSES: dict[PolicyLoss, LossSpec] = {
    PolicyLoss.CROSS_ENTROPY: LossSpec(PolicyLoss.CROSS_ENTROPY, cross_entropy, CrossEntropyConfig),
    PolicyLoss.IMPORTANCE_SAMPLING: LossSpec(
        PolicyLoss.IMPORTANCE_SAMPLING,
        importance_sampling,
        ImportanceSamplingConfig,
        OldPolicy.SAMPLER,
    ),
    PolicyLoss.PPO: LossSpec(PolicyLoss.PPO, ppo, PPOConfig, tinker_config=_CLIP_KEYS),
    PolicyLoss.CISPO: LossSpec(PolicyLoss.CISPO, cispo, ClipConfig, tinker_config=_CLIP_KEYS),
    PolicyLoss.DRO: LossSpec(
        PolicyLoss.DRO, dro, DROConfig, OldPolicy.SAMPLER, tinker_config=("beta",)
    ),
    PolicyLoss.GSPO: LossSpec(PolicyLoss.GSPO, gspo, GSPOConfig, tinker_config=_CLIP_KEYS),
}
"""Every policy loss, by name."""


def loss_spec(name: PolicyLoss | str) -> LossSpec:
    """The catalogue entry of `name`; ValueError listing the known names for an unknown one."""
    try:
        return LOSSES[PolicyLoss(name)]
    except ValueError:
        known = [loss.value for loss in PolicyLoss]
        raise ValueError(f"unknown policy loss {name!r}; known: {known}") from None


def config_for(algorithm: AlgorithmConfig, *, dual_clip: bool = True) -> LossConfig:
    """The typed settings of `algorithm.loss` from the trainer's config (`clip_low` 0.2 is the
    bound 0.8); `dual_clip=False` drops PPO's dual clip (Tinker's `ppo` has none)."""
    lo, hi = 1.0 - algorithm.clip_low, 1.0 + algorithm.clip_high
    loss = algorithm.loss
    if loss is PolicyLoss.PPO:
        return PPOConfig(lo, hi, algorithm.dual_clip if dual_clip else None)
    if loss is PolicyLoss.CISPO:
        return ClipConfig(lo, hi)
    if loss is PolicyLoss.GSPO:
        return GSPOConfig(lo, hi)
    if loss is PolicyLoss.DRO:
        if algorithm.dro_beta is None:
            raise ValueError("algorithm.dro_beta is required when algorithm.loss is 'dro'")
        return DROConfig(algorithm.dro_beta)
    if loss is PolicyLoss.CROSS_ENTROPY:
        return CrossEntropyConfig()
    return ImportanceSamplingConfig()


def tinker_loss_config(config: LossConfig) -> dict[str, float] | None:
    """`config` as Tinker's `loss_fn_config` (None when the loss takes none)."""
    if isinstance(config, ClipConfig):
        return {
            "clip_low_threshold": float(config.clip_low_threshold),
            "clip_high_threshold": float(config.clip_high_threshold),
        }
    if isinstance(config, DROConfig):
        return {"beta": config.beta}
    return None


@dataclass(frozen=True)
class PolicyLossStats:
    """Diagnostics of one policy-loss evaluation (masked token averages)."""

    clip_fraction: float
    """Share of tokens whose ratio was clipped."""
    ratio_mean: float
    """Mean of the ratio the loss saw over generated tokens (1 for a loss without one)."""
    dual_clip_fraction: float = 0.0
    """Share of negative-advantage tokens held by the dual clip."""


def policy_loss(
    name: PolicyLoss | str,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
    *,
    reduction: Reduction = Reduction.TOKEN_MEAN,
    normalizer: float | None = None,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """The trainer's policy loss: loss `name` per token, times `is_weights` (detached: truncated
    importance sampling for stale tokens), reduced over `mask`.

    `advantages` is `[batch, tokens]` or `[batch]` (broadcast over tokens).
    """
    spec = loss_spec(name)
    if not isinstance(config, spec.config_type):
        raise TypeError(
            f"loss {spec.name.value!r} takes a {spec.config_type.__name__}, "
            f"got {type(config).__name__}"
        )
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    terms = spec.fn(logprobs, old_logprobs, advantages, mask, config)
    per_token = terms.per_token
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    loss = reduce(per_token, mask, reduction, normalizer)
    with torch.no_grad():
        zeros = torch.zeros(mask.shape, dtype=logprobs.dtype, device=mask.device)
        stats = PolicyLossStats(
            clip_fraction=_masked_mean(_or(terms.clipped, zeros), mask),
            ratio_mean=_masked_mean(_or(terms.ratio, zeros + 1.0), mask),
            dual_clip_fraction=_masked_mean(_or(terms.dual_clipped, zeros), mask),
        )
    return loss, stats


def _or(x: torch.Tensor | None, default: torch.Tensor) -> torch.Tensor:
    return default if x is None else x.to(default.dtype)


# -- reductions and the other terms --------------------------------------------------------


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


def observation_loss(
    logprobs: torch.Tensor, observation_mask: torch.Tensor, num_tokens: float
) -> torch.Tensor:
    """ECHO's term: the summed negative log-likelihood of the env's observation tokens
    (`observation_mask` 1, `[batch, tokens]`) divided by `num_tokens` (the batch's observation
    tokens, so micro-batch terms add up to the batch's token mean).

    `logprobs` are the learner's log-probabilities of the tokens that were there, as for the
    policy loss; the trainer adds `algorithm.observation_loss_coef` times this term.
    """
    mask = observation_mask.to(logprobs.dtype)
    return -(logprobs * mask).sum() / max(float(num_tokens), 1.0)


def logit_kl(
    logits: torch.Tensor,
    teacher_ids: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    mask: torch.Tensor,
    num_tokens: float,
) -> torch.Tensor:
    """On-policy distillation's logit term: at each position where `mask` is 1, the forward
    KL from the teacher's top tokens to the student's distribution,

        KL_t = sum_j q_j (log q_j - log p_student(v_j)),   q = softmax(teacher_logprobs_t)

    over the teacher's `k` most likely ids `v_j` (`teacher_ids`, `[batch, tokens, k]`) with
    their logprobs renormalised over those `k` (`teacher_logprobs`), summed over the masked
    positions and divided by `num_tokens` (the batch's distilled tokens, so micro-batch terms
    add up to the batch's token mean). `logits` (`[batch, tokens, vocab]`) are the student's;
    only they carry a gradient. Never negative; 0 exactly where the student's distribution
    is `q` (all its mass on those ids, in the teacher's proportions)."""
    logits = logits.float()
    student = logits.gather(-1, teacher_ids) - torch.logsumexp(logits, dim=-1, keepdim=True)
    target = torch.log_softmax(teacher_logprobs.float(), dim=-1)
    per_token = (target.exp() * (target - student)).sum(dim=-1)
    return (per_token * mask.to(per_token.dtype)).sum() / max(float(num_tokens), 1.0)


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
