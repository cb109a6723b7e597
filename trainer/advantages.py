"""Advantage estimators for group-sampled episodes (GRPO, RLOO).

Rewards arrive as a `[groups, samples]` tensor: each row holds the returns of the episodes
sampled for one prompt. All functions are pure and differentiable-free (advantages are targets).
"""

from __future__ import annotations

import torch


def grpo_advantages(
    rewards: torch.Tensor, *, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantages: `(r - mean(group)) / (std(group) + eps)`.

    With `normalize_std=False` this is Dr.GRPO's unscaled version, `r - mean(group)`, which does
    not up-weight groups whose rewards barely differ. The std is the unbiased sample std, as in
    the GRPO paper; a group of one has advantage 0.
    """
    _check_grouped(rewards)
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if not normalize_std or rewards.shape[1] < 2:
        return centered if rewards.shape[1] > 1 else torch.zeros_like(rewards)
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out: each sample's baseline is the mean of the *other* samples.

    `r_i - mean_{j != i} r_j`, which equals `n / (n - 1) * (r_i - mean)`. Needs n >= 2.
    """
    _check_grouped(rewards)
    n = rewards.shape[1]
    if n < 2:
        raise ValueError("RLOO needs at least 2 samples per group")
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (n - 1)
    return rewards - others_mean


def nonzero_variance_groups(rewards: torch.Tensor, atol: float = 1e-8) -> torch.Tensor:
    """A `[groups]` bool mask of groups whose rewards are not all equal.

    Groups where every sample got the same reward carry no GRPO signal (all advantages are 0);
    filtering them keeps batches informative (DAPO's dynamic sampling).
    """
    _check_grouped(rewards)
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) > atol


def _check_grouped(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, samples], got shape {tuple(rewards.shape)}")
