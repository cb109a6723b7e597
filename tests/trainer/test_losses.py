"""The policy-loss catalogue, reductions, KL and entropy against hand-computed values.

Every expected number is worked out in the test by plain arithmetic on the inputs, never by
calling the catalogue itself."""

import dataclasses
import math

import pytest
import torch

from skyrl_sdk.trainer import losses
from skyrl_sdk.trainer.config import AlgorithmConfig
from skyrl_sdk.trainer.losses import (
    LOSSES,
    ClipConfig,
    CrossEntropyConfig,
    DROConfig,
    GSPOConfig,
    ImportanceSamplingConfig,
    KLEstimator,
    PolicyLoss,
    PPOConfig,
    Reduction,
    entropy_from_logits,
    kl_penalty,
    loss_spec,
    policy_loss,
    reduce,
    token_logprobs,
    truncated_is_weights,
)


def t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def trainer_ppo(new, old, adv, mask, *, clip_low=0.2, clip_high=0.2, dual_clip=3.0, **kw):
    """The trainer's PPO as `algorithm.loss: ppo` configures it (bounds 1 - low, 1 + high)."""
    config = PPOConfig(1.0 - clip_low, 1.0 + clip_high, dual_clip)
    return policy_loss(PolicyLoss.PPO, new, old, adv, mask, config, **kw)


def _sum(name, new, old, adv, config):
    """Per-token loss of catalogue entry `name` over an all-ones mask, and its sum."""
    per_token = loss_spec(name).fn(new, old, adv, torch.ones_like(new), config).per_token
    return per_token, per_token.sum()


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
    loss, stats = trainer_ppo(new, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
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
    loss, _ = trainer_ppo(new, old, t([1.0]), t([1]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.25)  # inside [0.8, 1.28]: not clipped


def test_ppo_gradient_vanishes_on_clipped_tokens():
    old = t([0.0, 0.0])
    new = torch.log(t([1.5, 1.0])).requires_grad_()
    loss, _ = trainer_ppo(new, old, t([1.0, 1.0]), t([1, 1]))
    loss.backward()
    assert new.grad[0, 0].item() == 0.0
    assert new.grad[0, 1].item() == pytest.approx(-0.5)  # d(-r*A)/dlogp = -r*A/N


def test_ppo_masks_and_broadcasts_sequence_advantages():
    old = t([0.0, 0.0], [0.0, 0.0])
    new = t([0.0, 9.0], [0.0, 0.0])  # the masked token has a wild ratio
    loss, _ = trainer_ppo(new, old, t(2.0, -1.0).squeeze(0), t([1, 0], [1, 1]))
    assert loss.item() == pytest.approx((-2.0 + 1.0 + 1.0) / 3)


def test_ppo_is_weights_scale_tokens():
    old = t([0.0, 0.0])
    new = t([0.0, 0.0])
    loss, _ = trainer_ppo(new, old, t([1.0, 1.0]), t([1, 1]), is_weights=t([0.5, 2.0]))
    assert loss.item() == pytest.approx(-(0.5 + 2.0) / 2)


def test_dual_clip_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip"):
        trainer_ppo(t([0.0]), t([0.0]), t([-1.0]), t([1]), dual_clip=0.5)
    with pytest.raises(ValueError, match="dual_clip"):
        PPOConfig(dual_clip=1.0)


def test_importance_sampling_loss_and_gradient():
    sampler = t([math.log(0.5), math.log(0.25)])
    new = t([math.log(0.5), math.log(0.5)]).requires_grad_()
    loss, stats = policy_loss(
        "importance_sampling", new, sampler, t([1.0, -1.0]), t([1, 1]), ImportanceSamplingConfig()
    )
    assert loss.item() == pytest.approx((-1.0 * 1 + 2.0 * 1) / 2)  # ratios 1 and 2
    assert stats.ratio_mean == pytest.approx(1.5)
    loss.backward()
    assert new.grad[0].tolist() == pytest.approx([-0.5, 1.0])


def test_cross_entropy_is_advantage_weighted_nll():
    new = torch.log(t([0.5, 0.25])).requires_grad_()
    loss, stats = policy_loss(
        "cross_entropy", new, None, t([2.0, -1.0]), t([1, 1]), CrossEntropyConfig()
    )
    # -A * logp: -2 * log(0.5) = 2 log 2 and -(-1) * log(0.25) = -2 log 2; token mean of both
    assert loss.item() == pytest.approx((2 * math.log(2) - 2 * math.log(2)) / 2)
    assert stats.ratio_mean == 1.0 and stats.clip_fraction == 0.0  # no ratio, no clip
    loss.backward()
    assert new.grad[0].tolist() == pytest.approx([-2.0 / 2, 1.0 / 2])  # -A / N


def test_cispo_keeps_gradients_of_clipped_tokens():
    old = t([0.0, 0.0, 0.0, 0.0])
    new = torch.log(t([1.5, 0.5, 1.0, 1.1])).requires_grad_()
    adv = t([1.0, -1.0, 2.0, 1.0])
    per_token, total = _sum("cispo", new, old, adv, ClipConfig(0.8, 1.2))
    # clip(r) = 1.2, 0.8, 1.0, 1.1 as constant weights on -logp * A
    expected = [
        -1.2 * math.log(1.5) * 1.0,
        -0.8 * math.log(0.5) * -1.0,
        -1.0 * 0.0 * 2.0,
        -1.1 * math.log(1.1) * 1.0,
    ]
    assert per_token[0].tolist() == pytest.approx(expected)
    total.backward()
    # d/dlogp = -clip(r) * A: the clipped tokens 0 and 1 still move (PPO's clip would stop
    # them), and the weight is a constant (no r * logp term: token 3 gets -1.1, not -1.2049)
    assert new.grad[0].tolist() == pytest.approx([-1.2, 0.8, -2.0, -1.1])
    _, stats = policy_loss("cispo", new, old, adv, t([1, 1, 1, 1]), ClipConfig())
    assert stats.clip_fraction == pytest.approx(2 / 4)
    assert stats.ratio_mean == pytest.approx((1.5 + 0.5 + 1.0 + 1.1) / 4)


def test_dro_is_reinforce_with_a_quadratic_pull_to_the_sampler():
    sampler = torch.log(t([0.5, 0.5]))
    new = torch.log(t([0.25, 0.5])).requires_grad_()
    per_token, total = _sum("dro", new, sampler, t([1.0, -1.0]), DROConfig(beta=0.5))
    # token 0: logp = log .25, log-ratio = log .5 -> -(log .25 * 1 - .25 * log(.5)^2)
    # token 1: log-ratio 0 -> -(log .5 * -1)
    token0 = -(math.log(0.25) * 1.0 - 0.5 / 2 * math.log(0.5) ** 2)
    token1 = -(math.log(0.5) * -1.0)
    assert per_token[0].tolist() == pytest.approx([token0, token1])
    total.backward()
    # d/dlogp = -(A - beta * log-ratio)
    assert new.grad[0].tolist() == pytest.approx([-(1.0 - 0.5 * math.log(0.5)), 1.0])


def test_gspo_clips_the_sequence_ratio():
    old = t([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    # sequence 0: token ratios 2, 0.5, 1 -> geometric mean 1 (inside the clip)
    # sequence 1: ratios 1.5, 1.5 in the ratio mask (the 9 is outside it) -> 1.5, clipped at 1.2
    new = torch.log(t([2.0, 0.5, 1.0], [1.5, 1.5, 9.0])).requires_grad_()
    config = GSPOConfig(0.8, 1.2, sequence_ratio_mask=t([1, 1, 1], [1, 1, 0]))
    per_token, total = _sum("gspo", new, old, t([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]), config)
    assert per_token.flatten().tolist() == pytest.approx([-1.0, -1.0, -1.0, -1.2, -1.2, -1.2])
    total.backward()
    # unclipped tokens: d(-A * ratio)/dlogp_t = -A * 1; the clipped sequence gets none
    assert new.grad.flatten().tolist() == pytest.approx([-1.0, -1.0, -1.0, 0.0, 0.0, 0.0])
    _, stats = policy_loss(
        "gspo", new, old, t(1.0, 1.0).squeeze(0), t([1, 1, 1], [1, 1, 1]), config
    )
    assert stats.clip_fraction == pytest.approx(3 / 6)
    assert stats.ratio_mean == pytest.approx((3 * 1.0 + 3 * 1.5) / 6)


def test_gspo_ratio_defaults_to_the_loss_mask():
    old = t([0.0, 0.0])
    new = torch.log(t([1.1, 50.0]))  # the masked-out token's ratio must not count
    loss, _ = policy_loss("gspo", new, old, t([1.0]), t([1, 0]), GSPOConfig(0.8, 1.2))
    assert loss.item() == pytest.approx(-1.1)


def test_catalogue_has_tinkers_names_and_one_lookup():
    names = ["cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo"]
    assert [loss.value for loss in PolicyLoss] == names
    assert set(LOSSES) == set(PolicyLoss)
    for name in names:
        spec = loss_spec(name)
        assert spec.name.value == name and spec is LOSSES[PolicyLoss(name)]
        assert dataclasses.is_dataclass(spec.config_type)
    with pytest.raises(ValueError, match=r"unknown policy loss 'nope'; known: \['cross_entropy'"):
        loss_spec("nope")
    with pytest.raises(TypeError, match="takes a DROConfig"):
        policy_loss("dro", t([0.0]), t([0.0]), t([1.0]), t([1]), ClipConfig())
    with pytest.raises(ValueError, match="needs old_logprobs"):
        policy_loss("ppo", t([0.0]), None, t([1.0]), t([1]), PPOConfig())


def test_config_for_maps_the_trainers_settings():
    alg = AlgorithmConfig(clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    assert losses.config_for(alg) == PPOConfig(0.8, 1.28, 3.0)
    assert losses.config_for(alg, dual_clip=False) == PPOConfig(0.8, 1.28, None)
    assert losses.tinker_loss_config(losses.config_for(alg)) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.28,
    }
    cispo = alg.model_copy(update={"loss": PolicyLoss.CISPO})
    assert losses.config_for(cispo) == ClipConfig(0.8, 1.28)
    dro = AlgorithmConfig(loss="dro", dro_beta=0.1)
    assert losses.config_for(dro) == DROConfig(0.1)
    assert losses.tinker_loss_config(DROConfig(0.1)) == {"beta": 0.1}
    assert losses.tinker_loss_config(ImportanceSamplingConfig()) is None
    # which policy the trainer's learner takes each ratio to
    sampler = {n for n, s in LOSSES.items() if s.old_policy is losses.OldPolicy.SAMPLER}
    assert sampler == {PolicyLoss.IMPORTANCE_SAMPLING, PolicyLoss.DRO}


def _server_objective(loss: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, **cfg):
    from skyrl_sdk.trainer.tinker.backend import _objective

    inputs = {
        "logprobs": old,
        "advantages": adv,
        "weights": adv,
        "sequence_ratio_mask": torch.ones_like(old),
        "clip_low_threshold": torch.full_like(old, 0.8),
        "clip_high_threshold": torch.full_like(old, 1.2),
    }
    return _objective(PolicyLoss(loss), new, inputs, cfg, torch.ones_like(old))


def test_tinker_server_ppo_is_the_trainers_clipped_surrogate():
    # The hand-computed case above, without dual clip (Tinker's PPO has none): per token
    # -1.2, -0.5, 1.1, 5.0; the server sums them, the trainer's constant reduction divides
    # by normalizer * batch.
    old = t([0.0, 0.0, 0.0, 0.0])
    new = torch.log(t([1.5, 0.5, 1.1, 5.0]))
    adv = t([1.0, 1.0, -1.0, -1.0])
    per_token = _server_objective("ppo", new, old, adv)
    assert per_token[0].tolist() == pytest.approx([-1.2, -0.5, 1.1, 5.0])
    trainer, _ = trainer_ppo(
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


def test_tinker_server_computes_every_loss_with_the_catalogue(monkeypatch):
    """The server has no loss math of its own: each `loss_fn` goes through `LOSSES`."""
    from skyrl_sdk.trainer.tinker import backend

    assert set(backend.LOSS_SPECS) == set(PolicyLoss)
    assert tuple(loss.value for loss in PolicyLoss) == backend.LOSSES
    old, new, adv = t([0.0, 0.0]), torch.log(t([1.5, 0.5])), t([1.0, -1.0])
    seen = []
    for name, spec in LOSSES.items():

        def marked(*args, _fn=spec.fn, _name=name):
            seen.append(_name)
            return _fn(*args)

        monkeypatch.setitem(LOSSES, name, dataclasses.replace(spec, fn=marked))
        _server_objective(name.value, new, old, adv, beta=0.5)
    assert seen == list(PolicyLoss)
    # the server's defaults are the catalogue's (Tinker's 1 -/+ 0.2; dro's beta required)
    assert backend.check_loss("cispo", {}) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.2,
    }
    with pytest.raises(ValueError, match="needs loss_fn_config\\['beta'\\]"):
        backend.check_loss("dro", {})


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
