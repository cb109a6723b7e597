"""ECHO's observation-token loss (`algorithm.observation_loss_coef`): its hand-computed value,
that it is exactly off at coefficient 0, and that it teaches a tiny model the env's tokens."""

import math

import pytest
import torch

from skyrl_sdk.agents.policy import FinishReason
from skyrl_sdk.agents.tiny import build_model
from skyrl_sdk.agents.trajectory import Segment, StopReason, TrainingSample, Trajectory, Turn
from skyrl_sdk.trainer import losses
from skyrl_sdk.trainer.config import AlgorithmConfig, OptimConfig
from skyrl_sdk.trainer.learner import Learner, LearnerSettings


def _model(seed=0):
    return build_model(32, hidden_size=32, num_layers=1, seed=seed, pad_token_id=0)


def _sample(observed=True):
    """Prompt 5 6, reply 9, observation 20 21, reply 10 (the observation mask 1 on 20 21)."""
    ids = (5, 6, 9, 20, 21, 10)
    loss_mask = (0, 0, 1, 0, 0, 1)
    observation = (0, 0, 0, 1, 1, 0) if observed else ()
    versions = (-1, -1, 0, -1, -1, 0)
    logprobs = (0.0, 0.0, -3.0, 0.0, 0.0, -3.0)
    return TrainingSample(ids, loss_mask, logprobs, versions, observation)


def _learner(coef, seed=0):
    algorithm = AlgorithmConfig(observation_loss_coef=coef)
    return Learner(_model(seed), LearnerSettings(algorithm=algorithm, optim=OptimConfig(lr=1e-2)))


def _observation_nll(model, sample):
    """The mean NLL of the observation tokens, by hand from the model's softmax."""
    ids = torch.tensor([sample.input_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    picked = [
        -logp[t - 1, sample.input_ids[t]].item()
        for t in range(1, len(sample.input_ids))
        if sample.observation_mask[t]
    ]
    return sum(picked) / len(picked)


def test_observation_loss_by_hand():
    # probabilities 1/2, 1/4, 1/8 (and 1/16 on a masked position); observation tokens 2 and 3
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.0625]]))
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    value = losses.observation_loss(logprobs, mask, num_tokens=2)
    # (ln 4 + ln 8) / 2 = 2.5 ln 2
    assert math.isclose(float(value), 2.5 * math.log(2.0), rel_tol=1e-6)
    # two micro-batch halves over the batch's count add up to the batch's token mean
    first = losses.observation_loss(logprobs[:, :2], mask[:, :2], num_tokens=2)
    second = losses.observation_loss(logprobs[:, 2:], mask[:, 2:], num_tokens=2)
    assert math.isclose(float(first + second), float(value), rel_tol=1e-6)
    assert math.isclose(float(first), math.log(4.0) / 2, rel_tol=1e-6)
    # no observation tokens: zero, not a division by zero
    assert float(losses.observation_loss(logprobs, mask * 0, num_tokens=0)) == 0.0


def test_coefficient_zero_is_bit_identical():
    # The observation mask is present in one run and absent in the other: at coefficient 0
    # the loss, the gradient and the updated weights are the same to the bit.
    runs = []
    for observed in (True, False):
        learner = _learner(0.0)
        stats = learner.train_step([_sample(observed), _sample(observed)], [1.0, -0.5])
        runs.append((stats, learner.model.state_dict()))
    (a, wa), (b, wb) = runs
    assert a.loss == b.loss and a.policy_loss == b.policy_loss and a.grad_norm == b.grad_norm
    assert a.observation_loss == 0.0
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_the_learner_reports_and_adds_the_hand_computed_term():
    sample = _sample()
    learner = _learner(0.5)
    expected = _observation_nll(learner.model, sample)
    stats = learner.train_step([sample], [0.0])
    assert math.isclose(stats.observation_loss, expected, rel_tol=1e-5)
    # advantage 0: the policy term has no gradient; the step is ECHO's alone
    assert stats.grad_norm > 0
    assert _learner(0.0).train_step([sample], [0.0]).grad_norm == 0.0


def test_observation_loss_teaches_the_env_tokens():
    sample = _sample()
    learner = _learner(1.0)
    before = _observation_nll(learner.model, sample)
    for _ in range(10):
        learner.train_step([sample], [0.0])
    assert _observation_nll(learner.model, sample) < before - 0.5


def test_training_samples_mark_the_observation_ids():
    turns = tuple(
        Turn(
            index=i,
            segment=0,
            action="a",
            token_ids=reply,
            logprobs=(-1.0,) * len(reply),
            policy_versions=(0,) * len(reply),
            finish_reason=FinishReason.STOP,
            observation=(),
            observation_ids=obs,
            reward=0.0,
        )
        for i, (reply, obs) in enumerate((((9, 10), (20, 21, 22)), ((11,), ())))
    )
    trajectory = Trajectory(
        episode_id="e",
        task_id="e",
        env_id="env",
        policy="p",
        stop_reason=StopReason.DONE,
        turns=turns,
        segments=(Segment(prompt_ids=(1, 2), prompt_messages=(), first_turn=0),),
        prompt_messages=(),
        reward=1.0,
        success=True,
    )
    [sample] = trajectory.training_samples()
    assert sample.input_ids == (1, 2, 9, 10, 20, 21, 22, 11)
    assert sample.loss_mask == (0, 0, 1, 1, 0, 0, 0, 1)
    assert sample.observation_mask == (0, 0, 0, 0, 1, 1, 1, 0)


def test_the_tinker_backend_refuses_it():
    from skyrl_sdk.trainer.backends.tinker import check_config
    from skyrl_sdk.trainer.config import ConfigError, build_config

    tinker = ["backend=tinker", "tinker.base_url=http://127.0.0.1:1", "tinker.base_model=m"]
    check_config(build_config({}, tinker))
    with pytest.raises(ConfigError, match="observation_loss_coef"):
        check_config(build_config({}, [*tinker, "algorithm.observation_loss_coef=0.1"]))
    with pytest.raises(ConfigError, match="init_from"):
        check_config(build_config({}, [*tinker, "model.init_from=runs/sft"]))


def test_micro_batches_add_up_to_the_batch_token_mean():
    # two samples with 2 and 1 observation tokens: the batch mean is over all 3 tokens,
    # however the batch is split into micro-batches
    short = TrainingSample(
        (5, 9, 20, 10), (0, 1, 0, 1), (0.0, -3.0, 0.0, -3.0), (-1, 0, -1, 0), (0, 0, 1, 0)
    )
    results = []
    for micro in (2, 1):
        settings = LearnerSettings(
            algorithm=AlgorithmConfig(observation_loss_coef=1.0),
            optim=OptimConfig(lr=1e-2),
            micro_batch_size=micro,
        )
        learner = Learner(_model(), settings)
        expected = (
            2 * _observation_nll(learner.model, _sample()) + _observation_nll(learner.model, short)
        ) / 3
        stats = learner.train_step([_sample(), short], [0.0, 0.0])
        assert math.isclose(stats.observation_loss, expected, rel_tol=1e-5)
        results.append((stats.grad_norm, learner.model.state_dict()))
    (ga, wa), (gb, wb) = results
    assert math.isclose(ga, gb, rel_tol=1e-4)
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
