"""Packed rows (`trainer.packing`) on a real tiny model: the same per-token logprobs, loss and
update as a padded batch, no attention across a sequence boundary, and a first-fit-decreasing
packer that fills rows up to the budget with every sequence in exactly one row."""

import random

import pytest
import torch

from skyrl_sdk.agents.tiny import build_model
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer import losses
from skyrl_sdk.trainer.config import AlgorithmConfig, LoRAConfig, OptimConfig
from skyrl_sdk.trainer.learner import Learner, LearnerSettings, _pad
from skyrl_sdk.trainer.packing import first_fit_decreasing, join_targets, pack, pack_row

VOCAB = 48


def _model(attn="sdpa"):
    model = build_model(VOCAB, hidden_size=32, num_layers=2, seed=0, pad_token_id=0)
    model.config._attn_implementation = attn
    return model


def _sample(n, seed, *, obs=False, per_token=False):
    """`n` random ids; loss on the second half (on all of them for odd seeds: a packed row
    must not train the first one, predicted across the boundary), observation tokens and
    per-token advantages on request."""
    rng = random.Random(seed)
    ids = tuple(rng.randrange(1, VOCAB) for _ in range(n))
    half = 0 if seed % 2 else n // 2
    mask = (0,) * half + (1,) * (n - half)
    return TrainingSample(
        input_ids=ids,
        loss_mask=mask,
        logprobs=tuple(-2.0 * m for m in mask),
        policy_versions=tuple(0 if m else -1 for m in mask),
        observation_mask=(0, 1) * (n // 2) + (0,) * (n % 2) if obs else (),
        token_advantages=tuple(rng.uniform(-1, 1) * m for m in mask) if per_token else (),
    )


def _batch():
    lengths = (9, 23, 4, 17, 2, 30, 11)
    return [_sample(n, i, obs=i % 2 == 0, per_token=i % 3 == 0) for i, n in enumerate(lengths)]


def _padded_logprobs(learner, samples):
    batch = _pad(samples, 0, learner._device())
    lp = losses.token_logprobs(learner._logits(learner.model, batch), batch.targets)
    return [lp[i, : len(s.input_ids) - 1] for i, s in enumerate(samples)]


def _packed_logprobs(learner, samples, members):
    """Each member's logprobs read back from one packed row."""
    row = pack_row(samples, [0.0] * len(samples), members)
    batch = _pad([row.sample], 0, learner._device(), [row.position_ids])
    lp = losses.token_logprobs(learner._logits(learner.model, batch), batch.targets)[0]
    out, start = {}, 0
    for i in members:
        n = len(samples[i].input_ids)
        out[i] = lp[start : start + n - 1]
        start += n
    return out


def _learner(pack_tokens=None, *, attn="sdpa", lora=False, **algorithm):
    settings = LearnerSettings(
        algorithm=AlgorithmConfig(**algorithm),
        optim=OptimConfig(lr=1e-2),
        lora=LoRAConfig(enabled=True, r=4) if lora else None,
        micro_batch_size=3,
        pack=pack_tokens is not None,
        pack_tokens=pack_tokens or None,
    )
    return Learner(_model(attn), settings)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_a_packed_row_gives_the_padded_logprobs(attn):
    learner = _learner(attn=attn)
    samples = _batch()
    padded = _padded_logprobs(learner, samples)
    packed = _packed_logprobs(learner, samples, [3, 0, 5, 2])
    for i, lp in packed.items():
        torch.testing.assert_close(lp, padded[i], atol=1e-5, rtol=0)


@pytest.mark.parametrize("lora", [False, True])
def test_no_token_attends_across_a_sequence_boundary(lora):
    learner = _learner(lora=lora)
    first, second = _sample(12, 1), _sample(9, 2)
    before = _packed_logprobs(learner, [first, second], [0, 1])
    changed = TrainingSample((7,) * 12, first.loss_mask, first.logprobs, first.policy_versions)
    after = _packed_logprobs(learner, [changed, second], [0, 1])
    assert not torch.allclose(after[0], before[0], atol=1e-3)  # the change is seen where it is
    torch.testing.assert_close(after[1], before[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"loss": "cross_entropy"},
        {"loss": "ppo", "mini_batches": 2, "kl_coef": 0.1, "entropy_coef": 0.01},
        {"loss": "cross_entropy", "observation_loss_coef": 0.5},
    ],
)
def test_a_packed_step_is_the_padded_step(algorithm):
    samples = _batch()
    advantages = [1.0, -0.5, 2.0, 0.25, 1.0, -1.0, 0.5]
    padded, packed = _learner(**algorithm), _learner(40, **algorithm)
    for step in range(2):
        a = padded.train_step(samples, advantages)
        b = packed.train_step(samples, advantages)
        for field in ("loss", "policy_loss", "kl_ref", "entropy", "grad_norm", "observation_loss"):
            assert getattr(b, field) == pytest.approx(getattr(a, field), abs=1e-5), field
        assert (b.tokens, b.sequences) == (a.tokens, a.sequences)
        # The same gradient, to float noise (not the weights after it: Adam's first steps
        # move a weight by about lr whatever its gradient's size, noise included); the second
        # step's loss is then measured on the weights each update made.
        if step == 0:
            for p, q in zip(padded.model.parameters(), packed.model.parameters(), strict=True):
                torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=0)


def test_micro_batches_inside_a_mini_batch_keep_their_own_proximal_logprobs():
    # Each forward of a mini-batch reads its own samples' proximal logprobs, so splitting a
    # mini-batch into smaller forwards changes nothing.
    samples, advantages = _batch(), [1.0, -0.5, 2.0, 0.25, 1.0, -1.0, 0.5]
    stats = []
    for micro in (1, 7):
        learner = _learner(loss="ppo", mini_batches=2)
        learner.micro_batch_size = micro
        stats.append(learner.train_step(samples, advantages))
    assert stats[0].loss == pytest.approx(stats[1].loss, abs=1e-5)
    assert stats[0].grad_norm == pytest.approx(stats[1].grad_norm, abs=1e-5)


def test_packing_needs_a_token_mean():
    with pytest.raises(ValueError, match="token_mean"):
        _learner(64, reduction="sequence_mean")


def test_rows_default_to_the_longest_sample_and_fill_forwards_of_micro_batch_rows():
    # 30 is the longest of the batch: rows of up to 30 tokens, 3 (micro_batch_size) a forward
    learner, widths = _learner(0), []
    learner.model.register_forward_pre_hook(
        lambda _, args, kwargs: widths.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    learner.train_step(_batch(), [1.0] * 7)
    assert widths == [(3, 30), (1, 9)]  # rows [30], [23, 4, 2], [17, 11], then [9]


def test_first_fit_decreasing_fills_rows_up_to_the_budget():
    assert first_fit_decreasing([5, 3, 8, 2, 7, 1], 10) == [[2, 3], [4, 1], [0, 5]]
    assert first_fit_decreasing([12, 3], 10) == [[0], [1]]  # too long: a row of its own
    rng = random.Random(0)
    for _ in range(50):
        lengths = [rng.randint(20, 400) for _ in range(rng.randint(1, 40))]
        budget = rng.choice([400, 512, 1024])
        bins = first_fit_decreasing(lengths, budget)
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        sums = [sum(lengths[i] for i in b) for b in bins]
        assert all(s <= budget for s in sums)
        # first fit: whatever went to a later row did not fit in the room an earlier one has
        for j, later in enumerate(bins):
            for earlier in sums[:j]:
                assert all(lengths[i] > budget - earlier for i in later)
        assert len(bins) <= 2 * sum(lengths) / budget + 1  # rows are more than half full


def test_a_packed_row_keeps_every_per_token_field():
    a, b = _sample(5, 0, obs=True, per_token=True), _sample(4, 1)
    (row,) = pack([a, b], [2.0, -1.0], budget=9)
    assert row.members == (0, 1)  # the longer first
    assert row.sample.input_ids == a.input_ids + b.input_ids
    assert row.position_ids == (0, 1, 2, 3, 4, 0, 1, 2, 3)
    assert row.sample.loss_mask == (0, *a.loss_mask[1:], 0, *b.loss_mask[1:])
    assert row.sample.observation_mask == (0, *a.observation_mask[1:], 0, 0, 0, 0)
    expected = [2.0 + t for t in a.token_advantages] + [-1.0] * 4
    assert row.sample.token_advantages == pytest.approx(expected)
    joined = join_targets([torch.ones(4), torch.full((3,), 2.0)])
    assert joined.tolist() == [1, 1, 1, 1, 0, 2, 2, 2]  # a filler at the boundary
