"""Advantage estimators against hand-computed values."""

import math

import pytest
import torch

from skyrl_sdk.trainer.advantages import (
    grpo_advantages,
    nonzero_variance_groups,
    rloo_advantages,
)


def test_grpo_normalises_within_each_group():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    adv = grpo_advantages(rewards, eps=0.0 + 1e-12)
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    assert torch.allclose(adv[0], torch.tensor([0.5, -0.5, -0.5, 0.5]) / std, atol=1e-6)
    assert torch.equal(adv[1], torch.zeros(4))  # no signal in a constant group


def test_grpo_without_std_is_plain_centering():
    rewards = torch.tensor([[3.0, 1.0, 2.0]])
    assert torch.allclose(
        grpo_advantages(rewards, normalize_std=False), torch.tensor([[1.0, -1.0, 0.0]])
    )


def test_grpo_single_sample_groups_get_zero():
    assert torch.equal(grpo_advantages(torch.tensor([[5.0], [1.0]])), torch.zeros(2, 1))


def test_rloo_uses_the_other_samples_as_baseline():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    # sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3
    assert torch.allclose(rloo_advantages(rewards), torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3]]))
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(torch.tensor([[1.0]]))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r"\[groups, samples\]"):
        grpo_advantages(torch.tensor([1.0, 2.0]))


def test_zero_variance_groups_are_flagged():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    assert nonzero_variance_groups(rewards).tolist() == [False, True, False]
