"""On-policy distillation's logit term (`algorithm.opd_logit_kl_coef`): the forward KL from the
teacher's top tokens to the student's distribution at every sampled position. Its value and
gradient by hand, the teacher's top tokens, their way through `distill`, packing and the
learner, and a tiny student whose distribution moves onto its teacher's."""

import asyncio
import math

import pytest
import torch

from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer import losses, opd
from skyrl_sdk.trainer.config import (
    AlgorithmConfig,
    ConfigError,
    ModelConfig,
    ModelSource,
    build_config,
)
from skyrl_sdk.trainer.learner import Learner, LearnerSettings
from skyrl_sdk.trainer.models import load_model


def test_logit_kl_has_its_hand_computed_value_and_gradient():
    """Student logits (0, 0, ln 2) give p = (0.25, 0.25, 0.5). The teacher's top two are ids
    2 and 0 with probabilities 0.6 and 0.2, renormalised q = (0.75, 0.25) on them:
    KL = 0.75 ln(0.75 / 0.5) + 0.25 ln(0.25 / 0.25) = 0.75 ln 1.5, and its gradient in the
    logits is p - q = (0.25 - 0.25, 0.25 - 0, 0.5 - 0.75). The second position is masked."""
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)], [5.0, -1.0, 0.0]]], requires_grad=True)
    teacher_ids = torch.tensor([[[2, 0], [1, 2]]])
    teacher_logprobs = torch.tensor([[[math.log(0.6), math.log(0.2)], [-0.1, -3.0]]])
    mask = torch.tensor([[1.0, 0.0]])
    value = losses.logit_kl(logits, teacher_ids, teacher_logprobs, mask, num_tokens=1)
    assert value.item() == pytest.approx(0.75 * math.log(1.5), abs=1e-6)
    value.backward()
    assert logits.grad[0, 0].tolist() == pytest.approx([0.0, 0.25, -0.25], abs=1e-6)
    assert logits.grad[0, 1].tolist() == pytest.approx([0.0, 0.0, 0.0])
    # Divided by the batch's distilled tokens, not by this micro-batch's.
    halved = losses.logit_kl(logits, teacher_ids, teacher_logprobs, mask, num_tokens=2)
    assert halved.item() == pytest.approx(0.75 * math.log(1.5) / 2, abs=1e-6)
    # 0 where the student is q itself (its mass outside the top ids only adds).
    exact = torch.tensor([[[math.log(0.25), -1e4, math.log(0.75)]]])
    zero = losses.logit_kl(exact, teacher_ids[:, :1], teacher_logprobs[:, :1], mask[:, :1], 1)
    assert float(zero) == pytest.approx(0.0, abs=1e-6)


def tiny(seed: int = 0, pretrain_steps: int = 0):
    model, tokenizer = load_model(
        ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=pretrain_steps), seed=seed
    )
    return model, tokenizer


def test_the_teacher_keeps_its_k_most_likely_ids_at_each_completion_token():
    model, _ = tiny(seed=5)
    scorer = opd.FrozenScorer(model, batch_size=2)
    pairs = [([1, 4, 7], [2, 5]), ([1, 4, 7, 8, 9, 2], [1, 5, 11]), ([3], [6, 7, 8])]
    scored = asyncio.run(scorer.score_batch_top_k(pairs, 4))
    for (prompt, completion), got in zip(pairs, scored, strict=True):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        for i, token in enumerate(completion):
            row = logp[len(prompt) - 1 + i]
            best = row.topk(4)
            assert got.top_ids[i] == tuple(best.indices.tolist())
            assert got.top_logprobs[i] == pytest.approx(best.values.tolist(), abs=1e-5)
            assert got.logprobs[i] == pytest.approx(row[token].item(), abs=1e-5)
    # Without k: the logprobs alone, as `score_batch` gives them.
    plain = asyncio.run(scorer.score_batch(pairs))
    assert [list(s.logprobs) for s in scored] == plain


# prompt 4 5 | sampled 8 9 | observation 10 | sampled 11
SAMPLE = TrainingSample(
    (4, 5, 8, 9, 10, 11),
    (0, 0, 1, 1, 0, 1),
    (0.0, 0.0, -1.0, -2.0, 0.0, -0.5),
    (-1, -1, 0, 0, -1, 0),
)


def test_distill_puts_the_top_tokens_on_sampled_ids_only():
    model, _ = tiny(seed=3)
    teacher = opd.FrozenScorer(model)
    (distilled,), stats = asyncio.run(opd.distill([SAMPLE], teacher, top_k=3))
    shapes = [len(top) for top in distilled.teacher_top_ids]
    assert shapes == [0, 0, 3, 3, 0, 3]  # not the prompt, not the env's observation
    assert [len(lp) for lp in distilled.teacher_top_logprobs] == shapes
    (alone,) = asyncio.run(
        teacher.score_batch_top_k([(SAMPLE.input_ids[:2], SAMPLE.input_ids[2:])], 3)
    )
    assert distilled.teacher_top_ids[5] == alone.top_ids[3]
    assert stats.tokens == 3
    # Without top_k nothing is kept.
    (bare,), _ = asyncio.run(opd.distill([SAMPLE], teacher))
    assert bare.teacher_top_ids == () and bare.token_advantages == distilled.token_advantages


def test_a_teacher_without_its_distribution_is_refused_for_the_logit_term():
    class LogprobsOnly:
        async def score(self, prompt_ids, completion_ids):
            return [-1.0] * len(completion_ids)

    with pytest.raises(opd.TeacherError, match="opd_logit_kl_coef needs the teacher's whole"):
        asyncio.run(opd.distill([SAMPLE], LogprobsOnly(), top_k=2))
    asyncio.run(opd.distill([SAMPLE], LogprobsOnly()))  # the advantage alone still works


def test_the_logit_term_needs_opd():
    with pytest.raises(ConfigError, match="opd_logit_kl_coef is only used with"):
        build_config({}, ["algorithm.opd_logit_kl_coef=1.0"])
    cfg = build_config(
        {}, ["algorithm.advantage=opd", "algorithm.teacher=tiny", "algorithm.opd_logit_kl_coef=1"]
    )
    assert cfg.algorithm.opd_top_k == 32


def distilled_samples(teacher_model, student_model, k: int) -> list[TrainingSample]:
    """Four samples the student drew, carrying the teacher's top `k` ids (`opd.distill`)."""
    generator = torch.Generator().manual_seed(0)
    samples = []
    for prompt in ([4, 5, 6], [7, 8], [9, 4, 5, 6], [6]):
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(5):
                probs = student_model(input_ids=torch.tensor([ids])).logits[0, -1].softmax(-1)
                ids.append(int(torch.multinomial(probs, 1, generator=generator)))
        n, m = len(ids), len(prompt)
        mask = (0,) * m + (1,) * (n - m)
        samples.append(TrainingSample(tuple(ids), mask, (0.0,) * n, (0,) * n))
    scored, _ = asyncio.run(opd.distill(samples, opd.FrozenScorer(teacher_model), top_k=k))
    return scored


def learner(model, coef: float, **settings) -> Learner:
    algorithm = AlgorithmConfig(
        loss="cross_entropy", advantage="opd", teacher="tiny", opd_logit_kl_coef=coef
    )
    optim = build_config({}, ["optim.lr=1e-2"]).optim
    return Learner(model, LearnerSettings(algorithm=algorithm, optim=optim, **settings))


def full_kl(teacher_model, student_model, samples) -> float:
    """Mean over sampled positions of the full-vocabulary KL(teacher || student)."""
    total = count = 0.0
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.input_ids])
            t = torch.log_softmax(teacher_model(input_ids=ids).logits[0, :-1].float(), -1)
            p = torch.log_softmax(student_model(input_ids=ids).logits[0, :-1].float(), -1)
            at = [i - 1 for i, m in enumerate(s.loss_mask) if m]
            total += float((t[at].exp() * (t[at] - p[at])).sum())
            count += len(at)
    return total / count


def test_the_learner_reports_the_term_padded_or_packed_and_trains_on_it_alone():
    """With every advantage 0 the policy loss has no gradient: the logit term is all that
    moves the student, and its full-vocabulary KL to the teacher falls (with coefficient 0
    nothing moves: a zero gradient skips the update). Padded and packed batches report the
    same term, which is `losses.logit_kl` of the student's own logits."""
    teacher_model, _ = tiny(seed=1, pretrain_steps=200)
    student_model, _ = tiny(seed=2)
    samples = distilled_samples(teacher_model, student_model, k=8)
    zero = [0.0] * len(samples)
    # The per-token advantages are the sampled-token term: off here, to isolate the logit one.
    samples = [
        TrainingSample(
            s.input_ids, s.loss_mask, s.logprobs, s.policy_versions, (), (),
            s.teacher_top_ids, s.teacher_top_logprobs,
        )
        for s in samples
    ]  # fmt: skip
    ids = torch.tensor([samples[0].input_ids])
    with torch.no_grad():
        logits = student_model(input_ids=ids).logits[:, :-1]
    first = samples[0]
    by_hand = losses.logit_kl(
        logits,
        torch.tensor([[top or (0,) * 8 for top in first.teacher_top_ids[1:]]]),
        torch.tensor([[lp or (0.0,) * 8 for lp in first.teacher_top_logprobs[1:]]]),
        torch.tensor([[1.0 if top else 0.0 for top in first.teacher_top_ids[1:]]]),
        num_tokens=5,
    )
    import copy

    padded = learner(copy.deepcopy(student_model), 1.0, micro_batch_size=1)
    assert padded.train_step(samples[:1], zero[:1]).logit_kl == pytest.approx(
        float(by_hand), rel=1e-4
    )
    a = learner(copy.deepcopy(student_model), 1.0, micro_batch_size=2)
    b = learner(copy.deepcopy(student_model), 1.0, micro_batch_size=1, pack=True, pack_tokens=64)
    assert a.train_step(samples, zero).logit_kl == pytest.approx(
        b.train_step(samples, zero).logit_kl, rel=1e-4
    )

    off = learner(copy.deepcopy(student_model), 0.0)
    before = full_kl(teacher_model, off.model, samples)
    off.train_step(samples, zero)
    assert full_kl(teacher_model, off.model, samples) == pytest.approx(before)
    on = learner(copy.deepcopy(student_model), 1.0)
    reported = [on.train_step(samples, zero).logit_kl for _ in range(12)]
    after = full_kl(teacher_model, on.model, samples)
    print(f"full KL(teacher || student) {before:.3f} -> {after:.3f}; logit term {reported}")
    assert after < 0.5 * before
    assert reported[-1] < 0.5 * reported[0]


def test_a_run_with_the_logit_term_trains_and_logs_it(tmp_path):
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer

    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path / 'run'}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "model.pretrain_steps=0",
            "algorithm.advantage=opd",
            "algorithm.teacher=lookup-tiny:7",
            "algorithm.opd_logit_kl_coef=0.5",
            "algorithm.opd_top_k=4",
            "trainer.steps=2",
            "trainer.groups_per_step=2",
            "rollout.group_size=2",
            "logging.console=false",
            "logging.trajectories=false",
        ],
    )
    result = AsyncTrainer(cfg).run()
    assert [row["loss/logit_kl"] > 0 for row in result.history] == [True, True]
