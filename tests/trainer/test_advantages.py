"""Advantage estimators against hand-computed values."""

import math

import pytest
import torch

from skyrl_sdk.trainer.advantages import (
    grpo_advantages,
    nonzero_variance_groups,
    returns_to_go,
    rloo_advantages,
    turn_level_advantages,
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


def test_returns_to_go():
    assert returns_to_go([0.0, 0.0, 1.0]) == [1.0, 1.0, 1.0]
    assert returns_to_go([1.0, 0.0, 1.0], gamma=0.5) == [1.25, 0.5, 1.0]
    assert returns_to_go([]) == []


def test_turn_level_advantages_credit_intermediate_rewards():
    # group 0: episode A gets 0.5 on turn 0 and 1 at the end; episode B gets nothing
    adv = turn_level_advantages([[0.5, 1.0], [0.0, 0.0]], [0, 0], normalize_std=False)
    # returns: A = [1.5, 1.0], B = [0, 0]; group mean of episode returns = 0.75
    assert adv == [[0.75, 0.25], [-0.75, -0.75]]
    # a lone episode in its own group is its own baseline
    assert turn_level_advantages([[1.0]], [3]) == [[0.0]]


def test_zero_variance_groups_are_flagged():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    assert nonzero_variance_groups(rewards).tolist() == [False, True, False]
