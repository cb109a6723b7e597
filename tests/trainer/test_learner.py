"""The learner on real tiny models: gradient direction, staleness stats, LoRA weight sync."""

import asyncio
import math

import pytest
import torch

from skyrl_sdk.agents.tiny import build_model
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.config import AlgorithmConfig, LoRAConfig, OptimConfig
from skyrl_sdk.trainer.learner import Learner, LearnerSettings


def _model(vocab=32, seed=0):
    return build_model(vocab, hidden_size=32, num_layers=1, seed=seed, pad_token_id=0)


def _sample(reply, version=0, logprob=-3.0):
    prompt = (5, 6, 7)
    return TrainingSample(
        input_ids=prompt + reply,
        loss_mask=(0,) * len(prompt) + (1,) * len(reply),
        logprobs=(0.0,) * len(prompt) + (logprob,) * len(reply),
        policy_versions=(-1,) * len(prompt) + (version,) * len(reply),
    )


def _logprob(model, sample):
    ids = torch.tensor([sample.input_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]
    return torch.log_softmax(logits, -1)[-1, sample.input_ids[-1]].item()


def test_positive_advantage_raises_its_tokens():
    learner = Learner(
        _model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig(lr=1e-2))
    )
    good, bad = _sample((9,)), _sample((10,))
    before = _logprob(learner.model, good), _logprob(learner.model, bad)
    for _ in range(5):
        stats = learner.train_step([good, bad], [1.0, -1.0])
    after = _logprob(learner.model, good), _logprob(learner.model, bad)
    assert after[0] > before[0] and after[1] < before[1]
    assert learner.version == 5
    assert stats.tokens == 2 and stats.sequences == 2
    assert stats.grad_norm > 0 and stats.entropy > 0


@pytest.mark.parametrize(
    "loss", ["ppo", "importance_sampling", "cispo", "dro", "gspo", "cross_entropy"]
)
def test_every_catalogue_loss_trains_the_learner(loss):
    algorithm = AlgorithmConfig(loss=loss, dro_beta=0.1)
    learner = Learner(_model(), LearnerSettings(algorithm=algorithm, optim=OptimConfig(lr=1e-2)))
    good, bad = _sample((9,)), _sample((10,))
    before = _logprob(learner.model, good), _logprob(learner.model, bad)
    for _ in range(3):
        learner.train_step([good, bad], [1.0, -1.0])
    after = _logprob(learner.model, good), _logprob(learner.model, bad)
    assert after[0] > before[0] and after[1] < before[1]


def test_staleness_and_truncated_is_stats():
    learner = Learner(
        _model(), LearnerSettings(algorithm=AlgorithmConfig(tis_cap=1.5), optim=OptimConfig())
    )
    learner.version = 3
    # Sampler logprob far below the learner's: the IS weight exceeds the cap on every token.
    stats = learner.train_step([_sample((9, 10), version=1, logprob=-20.0)], [1.0])
    assert stats.staleness_max == 2 and stats.staleness_mean == 2.0
    assert stats.tis_clip_fraction == 1.0


def test_micro_batches_match_one_batch():
    samples = [_sample((9,)), _sample((10, 11)), _sample((12,))]
    advantages = [1.0, -0.5, 0.3]
    grads = []
    for micro in (3, 1):
        learner = Learner(
            _model(),
            LearnerSettings(
                algorithm=AlgorithmConfig(),
                optim=OptimConfig(grad_clip=None),
                micro_batch_size=micro,
            ),
        )
        learner.optimizer.step = lambda: None  # compare gradients, not updates
        learner.train_step(samples, advantages)
        grads.append(
            torch.cat([p.grad.flatten() for p in learner.model.parameters() if p.grad is not None])
        )
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_zero_advantages_do_not_move_weights():
    learner = Learner(_model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig()))
    learner.train_step([_sample((9,))], [1.0])  # Adam now has momentum
    before = [p.detach().clone() for p in learner.model.parameters()]
    learner.train_step([_sample((9,))], [0.0])
    assert all(torch.equal(a, b) for a, b in zip(before, learner.model.parameters(), strict=True))


def test_state_dict_round_trip():
    a = Learner(_model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig()))
    a.train_step([_sample((9,))], [1.0])
    b = Learner(_model(seed=1), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig()))
    b.load_state_dict(a.state_dict())
    assert b.version == 1
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_lora_trains_adapters_and_merges_for_the_engine():
    pytest.importorskip("peft")
    base = _model()
    plain_keys = set(base.state_dict())
    learner = Learner(
        _model(),
        LearnerSettings(
            algorithm=AlgorithmConfig(kl_coef=0.1),
            optim=OptimConfig(lr=1e-2),
            lora=LoRAConfig(enabled=True, r=4, target_modules=("q_proj", "v_proj")),
        ),
    )
    trainable = [n for n, p in learner.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    good = _sample((9,))
    before = _logprob(learner.model, good)
    for _ in range(5):
        stats = learner.train_step([good, _sample((10,))], [1.0, -1.0])
    assert stats.kl_ref > 0
    weights = learner.engine_weights()
    assert set(weights) == plain_keys
    base.load_state_dict(weights)  # an engine's plain model accepts the merged weights
    assert _logprob(base, good) > before
    assert _logprob(base, good) == pytest.approx(_logprob(learner.model, good), abs=1e-4)


def test_learner_settings_follow_the_config():
    from skyrl_sdk.trainer.config import build_config

    config = build_config({}, ["rollout.temperature=0.5", "trainer.micro_batch_size=3"])

    class _Tok:
        pad_token_id = None  # no pad id: 0 is used

    settings = LearnerSettings.from_config(config, _Tok())
    assert settings.temperature == 0.5 and settings.micro_batch_size == 3
    assert settings.pad_token_id == 0 and settings.total_steps == config.trainer.steps
    learner = Learner(_model(), settings)
    assert learner.settings == settings
    assert learner.temperature == 0.5 and learner.micro_batch_size == 3


def test_tinker_lora_spec_builds_the_trainers_lora_settings():
    pytest.importorskip("peft")
    from skyrl_sdk.trainer.learner import wrap_lora
    from skyrl_sdk.trainer.tinker import lora

    sdk = {"rank": 4, "train_mlp": False, "train_unembed": False, "seed": 7}
    settings = lora.from_request(sdk)
    assert settings == LoRAConfig(
        enabled=True,
        r=4,
        alpha=4.0,
        target_modules=("q_proj", "k_proj", "v_proj", "o_proj"),
        seed=7,
    )
    # the seed makes the adapters' initialisation reproducible, whatever the global RNG did
    first = wrap_lora(_model(), settings).state_dict()
    torch.manual_seed(123)
    second = wrap_lora(_model(), settings).state_dict()
    lora_keys = [k for k in first if "lora_A" in k]
    assert lora_keys and all("mlp" not in k and "lm_head" not in k for k in first if "lora_" in k)
    assert all(torch.equal(first[k], second[k]) for k in lora_keys)


def test_kl_sampler_estimates_kl_from_the_samplers_tokens():
    """Tokens the sampler found likelier than the learner now does (a stale batch after
    updates) give k3 = r - log r - 1 with r = p_learner / p_sampler: linear in the log-gap,
    never exp(gap) (which once logged ~7.9 for a healthy SmolLM2 run at staleness 1)."""
    learner = Learner(_model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig()))
    sample = _sample((9,))
    own = _logprob(learner.model, sample)
    on_policy = learner.train_step([_sample((9,), logprob=own)], [0.0])
    assert on_policy.kl_sampler == pytest.approx(0.0, abs=1e-5)
    gap = 10.0  # the sampler gave the token logprob own + 10
    stale = learner.train_step(
        [_sample((9,), logprob=_logprob(learner.model, sample) + gap)], [0.0]
    )
    assert stale.kl_sampler == pytest.approx(math.exp(-gap) + gap - 1.0, rel=1e-3)


def _assert_same_step(a, b, first, second, *, gradients):
    """Two learners' steps (`LearnerStats` `a`, `b`) agree to float noise, and with
    `gradients` so do the gradients they left (not the weights after them: Adam's first steps
    move a weight by about lr whatever its gradient's size, noise included)."""
    for field in ("loss", "policy_loss", "kl_ref", "entropy", "grad_norm", "observation_loss"):
        assert getattr(a, field) == pytest.approx(getattr(b, field), abs=1e-5), field
    if gradients:
        for p, q in zip(first.model.parameters(), second.model.parameters(), strict=True):
            if p.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0)


def _prompted(seed, prompt_len, reply_len, *, obs=False, per_token=False):
    """A sample with a shared-length prompt (no loss) and a scored reply; observation tokens
    inside the reply and per-token advantages on request."""
    import random

    rng = random.Random(seed)
    ids = tuple(rng.randrange(1, 32) for _ in range(prompt_len + reply_len))
    mask = (0,) * prompt_len + tuple(rng.choice((1, 1, 0)) for _ in range(reply_len))
    return TrainingSample(
        input_ids=ids,
        loss_mask=mask,
        logprobs=tuple(-2.0 * m for m in mask),
        policy_versions=tuple(0 if m else -1 for m in mask),
        observation_mask=tuple(int(not m and i >= prompt_len) for i, m in enumerate(mask))
        if obs
        else (),
        token_advantages=tuple(rng.uniform(-1, 1) * m for m in mask) if per_token else (),
    )


@pytest.mark.parametrize(
    ("algorithm", "lora", "pack"),
    [
        ({"loss": "ppo", "mini_batches": 2, "entropy_coef": 0.01}, False, False),
        ({"loss": "ppo", "kl_coef": 0.1}, True, False),
        ({"loss": "importance_sampling", "kl_coef": 0.1}, False, False),
        ({"loss": "cross_entropy", "observation_loss_coef": 0.5}, False, True),
    ],
)
def test_logits_only_where_a_loss_reads_them_change_nothing(monkeypatch, algorithm, lora, pack):
    # The learner projects logits only from the first scored position of a forward on (the
    # prompt's positions carry no loss): the step must be the full-logits step.
    from skyrl_sdk.trainer import learner as learner_module

    samples = [
        _prompted(i, 6 + i % 3, 5 + 2 * i, obs=i % 2 == 0, per_token=i == 3) for i in range(5)
    ]
    advantages = [1.0, -0.5, 2.0, 0.25, -1.0]
    seen = []
    real = learner_module._scored_region

    def recording(batch, adv, old_rows):
        out = real(batch, adv, old_rows)
        seen.append(out[0].first_scored)
        return out

    def build():
        settings = LearnerSettings(
            algorithm=AlgorithmConfig(**algorithm),
            optim=OptimConfig(lr=1e-2),
            lora=LoRAConfig(enabled=True, r=4) if lora else None,
            micro_batch_size=2,
            pack=pack,
            pack_tokens=40 if pack else None,
        )
        return Learner(_model(), settings)

    sliced, full = build(), build()
    assert sliced.keeps_logits
    for step in range(2):
        monkeypatch.setattr(learner_module, "_scored_region", recording)
        a = sliced.train_step(samples, advantages)
        monkeypatch.setattr(learner_module, "_scored_region", lambda b, adv, old: (b, adv, old))
        b = full.train_step(samples, advantages)
        _assert_same_step(a, b, sliced, full, gradients=step == 0)
    assert min(seen) >= 5  # every forward skipped at least the shortest prompt's positions


def test_scoring_projects_only_the_completion():
    learner = Learner(
        _model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig(lr=1e-2))
    )
    prompt, completion = [5, 6, 7, 8], [9, 10, 11]
    (got,) = learner._score_batch([(prompt, completion)])
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = torch.log_softmax(learner.model(input_ids=ids).logits[0, :-1], -1)
    want = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]
    assert got == pytest.approx(want, abs=1e-6)


def test_batched_scores_are_each_pair_scored_alone_with_a_shared_prompt_forwarded_once():
    """`Learner.score_batch` (what the weight-sync check calls): rows sharing a prompt forward
    it once, and every completion still gets the full forward's logprobs."""
    learner = Learner(
        _model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig(lr=1e-2))
    )
    prompt = [5, 6, 7, 8] * 5  # 20 ids, above MIN_SHARED_PREFIX
    pairs = [(prompt, [9, 10, 11]), (prompt, [12]), ([*prompt, 3], [4, 9])]
    got = asyncio.run(learner.score_batch(pairs))
    for (p, completion), scores in zip(pairs, got, strict=True):
        ids = torch.tensor([p + completion])
        with torch.no_grad():
            logp = torch.log_softmax(learner.model(input_ids=ids).logits[0, :-1], -1)
        want = [logp[len(p) - 1 + i, t].item() for i, t in enumerate(completion)]
        assert scores == pytest.approx(want, abs=1e-5)
    assert learner.model.training  # scoring leaves the model in training mode


def _group(prompt_len, shared_len, reply_lens, *, seed=0):
    """A GRPO group: rows whose prompts agree on their first `shared_len` ids, then their
    replies (scored, with an observation token inside the longer ones)."""
    import random

    rng = random.Random(seed)
    common = tuple(rng.randrange(1, 32) for _ in range(shared_len))
    out = []
    for n in reply_lens:
        prompt = common + tuple(rng.randrange(1, 32) for _ in range(prompt_len - shared_len))
        reply = tuple(rng.randrange(1, 32) for _ in range(n))
        mask = (0,) * prompt_len + tuple(0 if i == 3 else 1 for i in range(n))
        out.append(
            TrainingSample(
                input_ids=prompt + reply,
                loss_mask=mask,
                logprobs=tuple(-2.0 * m for m in mask),
                policy_versions=tuple(0 if m else -1 for m in mask),
                observation_mask=tuple(int(i == prompt_len + 3) for i in range(len(mask))),
            )
        )
    return out


@pytest.mark.parametrize(
    ("algorithm", "lora", "shared_len"),
    [
        ({"loss": "ppo", "mini_batches": 2, "entropy_coef": 0.01}, False, 20),
        ({"loss": "ppo", "kl_coef": 0.1}, True, 20),  # the reference pass shares it too
        ({"loss": "cross_entropy", "observation_loss_coef": 0.5}, False, 20),
        ({"loss": "importance_sampling"}, True, 17),  # prompts differ after 17 of 20 ids
    ],
)
def test_a_shared_prompt_forwarded_once_changes_nothing(monkeypatch, algorithm, lora, shared_len):
    from skyrl_sdk.trainer import model_forward

    samples = _group(20, shared_len, (5, 9, 2, 7))
    advantages = [1.0, -0.5, 2.0, -1.0]
    seen = []
    real = model_forward._shared_prefix_logits

    def recording(model, ids, attention, first, shared, name):
        seen.append(shared)
        return real(model, ids, attention, first, shared, name)

    def build():
        settings = LearnerSettings(
            algorithm=AlgorithmConfig(**algorithm),
            optim=OptimConfig(lr=1e-2),
            lora=LoRAConfig(enabled=True, r=4) if lora else None,
            micro_batch_size=4,
        )
        return Learner(_model(), settings)

    shared, rowwise = build(), build()
    monkeypatch.setattr(model_forward, "_shared_prefix_logits", recording)
    for step in range(2):
        monkeypatch.setattr(model_forward, "MIN_SHARED_PREFIX", 16)
        a = shared.train_step(samples, advantages)
        monkeypatch.setattr(model_forward, "MIN_SHARED_PREFIX", 10**9)
        b = rowwise.train_step(samples, advantages)
        _assert_same_step(a, b, shared, rowwise, gradients=step == 0)
    assert seen and set(seen) == {shared_len}
