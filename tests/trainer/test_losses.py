"""Policy losses, reductions, KL and entropy against hand-computed values."""

import math

import pytest
import torch

from skyrl_sdk.trainer.losses import (
    KLEstimator,
    Reduction,
    entropy_from_logits,
    importance_sampling_loss,
    kl_penalty,
    ppo_clip_loss,
    reduce,
    token_logprobs,
    truncated_is_weights,
)


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_reductions():
    loss = t([1.0, 2.0, 3.0], [4.0, 0.0, 0.0])
    mask = t([1, 1, 1], [1, 0, 0])
    assert reduce(loss, mask, Reduction.TOKEN_MEAN).item() == pytest.approx(10 / 4)
    assert reduce(loss, mask, Reduction.SEQUENCE_MEAN).item() == pytest.approx((2 + 4) / 2)
    assert reduce(loss, mask, Reduction.CONSTANT, normalizer=5).item() == pytest.approx(
        10 / (5 * 2)
    )
    with pytest.raises(ValueError, match="normalizer"):
        reduce(loss, mask, Reduction.CONSTANT)


def test_ppo_clip_matches_hand_computation():
    old = t([0.0, 0.0, 0.0, 0.0])
    new = torch.log(t([1.5, 0.5, 1.1, 5.0]))  # ratios
    adv = t([1.0, 1.0, -1.0, -1.0])
    mask = t([1, 1, 1, 1])
    loss, stats = ppo_clip_loss(new, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    # token 0: A>0, r=1.5 -> clipped at 1.2 -> -1.2
    # token 1: A>0, r=0.5 -> min(0.5, 0.8)*A -> -0.5 (not clipped: pessimistic term is unclipped)
    # token 2: A<0, r=1.1 -> max(1.1, 1.1) -> 1.1
    # token 3: A<0, r=5 -> max(5, 1.2) = 5, dual clip caps at 3
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.1 + 3.0) / 4)
    assert stats.clip_fraction == pytest.approx(1 / 4)
    assert stats.dual_clip_fraction == pytest.approx(1 / 4)
    assert stats.ratio_mean == pytest.approx((1.5 + 0.5 + 1.1 + 5.0) / 4)


def test_ppo_clip_higher_is_asymmetric():
    old = t([0.0])
    new = torch.log(t([1.25]))
    loss, _ = ppo_clip_loss(new, old, t([1.0]), t([1]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.25)  # inside [0.8, 1.28]: not clipped


def test_ppo_gradient_vanishes_on_clipped_tokens():
    old = t([0.0, 0.0])
    new = torch.log(t([1.5, 1.0])).requires_grad_()
    loss, _ = ppo_clip_loss(new, old, t([1.0, 1.0]), t([1, 1]))
    loss.backward()
    assert new.grad[0, 0].item() == 0.0
    assert new.grad[0, 1].item() == pytest.approx(-0.5)  # d(-r*A)/dlogp = -r*A/N


def test_ppo_masks_and_broadcasts_sequence_advantages():
    old = t([0.0, 0.0], [0.0, 0.0])
    new = t([0.0, 9.0], [0.0, 0.0])  # the masked token has a wild ratio
    loss, _ = ppo_clip_loss(new, old, t(2.0, -1.0).squeeze(0), t([1, 0], [1, 1]))
    assert loss.item() == pytest.approx((-2.0 + 1.0 + 1.0) / 3)


def test_ppo_is_weights_scale_tokens():
    old = t([0.0, 0.0])
    new = t([0.0, 0.0])
    loss, _ = ppo_clip_loss(new, old, t([1.0, 1.0]), t([1, 1]), is_weights=t([0.5, 2.0]))
    assert loss.item() == pytest.approx(-(0.5 + 2.0) / 2)


def test_dual_clip_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(t([0.0]), t([0.0]), t([-1.0]), t([1]), dual_clip=0.5)


def test_importance_sampling_loss_and_gradient():
    sampler = t([math.log(0.5), math.log(0.25)])
    new = t([math.log(0.5), math.log(0.5)]).requires_grad_()
    loss, stats = importance_sampling_loss(new, sampler, t([1.0, -1.0]), t([1, 1]))
    assert loss.item() == pytest.approx((-1.0 * 1 + 2.0 * 1) / 2)  # ratios 1 and 2
    assert stats.ratio_mean == pytest.approx(1.5)
    loss.backward()
    assert new.grad[0].tolist() == pytest.approx([-0.5, 1.0])


def _server_objective(loss: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor):
    from skyrl_sdk.trainer.tinker.backend import LossFn, _objective

    inputs = {
        "logprobs": old,
        "advantages": adv,
        "clip_low_threshold": torch.full_like(old, 0.8),
        "clip_high_threshold": torch.full_like(old, 1.2),
    }
    return _objective(LossFn(loss), new, inputs, {}, torch.ones_like(old))


def test_tinker_server_ppo_is_the_trainers_clipped_surrogate():
    # The hand-computed case above, without dual clip (Tinker's PPO has none): per token
    # -1.2, -0.5, 1.1, 5.0; the server sums them, the trainer's constant reduction divides
    # by normalizer * batch.
    old = t([0.0, 0.0, 0.0, 0.0])
    new = torch.log(t([1.5, 0.5, 1.1, 5.0]))
    adv = t([1.0, 1.0, -1.0, -1.0])
    per_token = _server_objective("ppo", new, old, adv)
    assert per_token[0].tolist() == pytest.approx([-1.2, -0.5, 1.1, 5.0])
    trainer, _ = ppo_clip_loss(
        new, old, adv, t([1, 1, 1, 1]), dual_clip=None, reduction=Reduction.CONSTANT, normalizer=1
    )
    assert per_token.sum().item() == pytest.approx(trainer.item()) == pytest.approx(4.4)


def test_tinker_server_importance_sampling_is_the_trainers():
    sampler = t([math.log(0.5), math.log(0.25)])
    new = t([math.log(0.5), math.log(0.5)]).requires_grad_()
    per_token = _server_objective("importance_sampling", new, sampler, t([1.0, -1.0]))
    assert per_token[0].tolist() == pytest.approx([-1.0, 2.0])  # ratios 1 and 2
    per_token.sum().backward()
    assert new.grad[0].tolist() == pytest.approx([-1.0, 2.0])  # the trainer's, times 2 tokens


def test_truncated_is_weights():
    weights, capped = truncated_is_weights(
        t([0.0, 0.0, 0.0]), torch.log(t([1.0, 2.0, 0.25])), cap=2.0
    )
    assert weights[0].tolist() == pytest.approx([1.0, 0.5, 2.0])  # 4.0 is capped at 2
    assert capped == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        truncated_is_weights(t([0.0]), t([0.0]), cap=0)


def test_kl_estimators():
    logp = torch.log(t([0.5, 0.2]))
    ref = torch.log(t([0.25, 0.2]))
    assert kl_penalty(logp, ref, KLEstimator.K1)[0].tolist() == pytest.approx([math.log(2), 0.0])
    # k3 with r = q/p = 0.5: 0.5 - log(0.5) - 1
    assert kl_penalty(logp, ref, KLEstimator.K3)[0].tolist() == pytest.approx(
        [0.5 + math.log(2) - 1, 0.0]
    )
    assert (
        kl_penalty(
            torch.randn(50, dtype=torch.float64),
            torch.randn(50, dtype=torch.float64),
            KLEstimator.K3,
        )
        >= 0
    ).all()


def test_k3_is_an_unbiased_kl_estimate():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.4, 0.4, 0.2], dtype=torch.float64)
    samples = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    k3 = kl_penalty(p.log()[samples], q.log()[samples], KLEstimator.K3).mean().item()
    exact = float((p * (p / q).log()).sum())
    assert k3 == pytest.approx(exact, rel=0.02)


def test_entropy_and_token_logprobs():
    logits = torch.log(t([[0.5, 0.25, 0.25]]))
    assert entropy_from_logits(logits).item() == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)), rel=1e-6
    )
    logits = torch.randn(2, 3, 7)
    ids = torch.randint(0, 7, (2, 3))
    expected = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, ids), expected, atol=1e-6)
