"""On-policy distillation (`algorithm.advantage: opd`, `trainer.opd`): the per-token
advantages by hand, their way into the loss, the config's checks, and a tiny student that
moves toward its teacher."""

import asyncio
from collections.abc import Sequence

import pytest
import torch

from skyrl_sdk.agents.policy import FinishReason
from skyrl_sdk.agents.scoring import Scorer
from skyrl_sdk.agents.trajectory import (
    Segment,
    StopReason,
    TrainingSample,
    Trajectory,
    Turn,
    read_trajectories,
)
from skyrl_sdk.trainer import opd
from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.batch import Group, build_batch
from skyrl_sdk.trainer.config import (
    AlgorithmConfig,
    ConfigError,
    ModelConfig,
    ModelSource,
    build_config,
)
from skyrl_sdk.trainer.learner import Learner, LearnerSettings
from skyrl_sdk.trainer.models import echo_corpus, load_model

# -- hand-computed advantages ------------------------------------------------------------

# A two-turn episode: prompt 5 6 | turn 0 samples 7 8 | observation 9 | turn 1 samples 10.
PROMPT, TURN0, OBS, TURN1 = (5, 6), (7, 8), (9,), (10,)
SAMPLER = {7: -1.0, 8: -2.0, 10: -0.5}
# The teacher's logprob of each token given the exact ids before it (a prefix it was not
# given scores as nothing here: the test fails if turn 1 were scored without turn 0 and the
# observation before it).
TEACHER = {
    (5, 6, 7): -0.5,
    (5, 6, 7, 8): -2.5,
    (5, 6, 7, 8, 9): -3.0,
    (5, 6, 7, 8, 9, 10): -0.25,
}


class TableTeacher:
    """A `Scorer` with given logprobs: each token's is looked up by its whole prefix."""

    def __init__(self, table: dict[tuple[int, ...], float]):
        self.table = table
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        self.calls.append((tuple(prompt_ids), tuple(completion_ids)))
        ids = list(prompt_ids)
        out = []
        for token in completion_ids:
            ids.append(token)
            out.append(self.table[tuple(ids)])
        return out


def turn(index: int, ids: tuple[int, ...], observation_ids: tuple[int, ...]) -> Turn:
    return Turn(
        index=index,
        segment=0,
        action="x",
        token_ids=ids,
        logprobs=tuple(SAMPLER[i] for i in ids),
        policy_versions=(0,) * len(ids),
        finish_reason=FinishReason.STOP,
        observation=(),
        observation_ids=observation_ids,
        reward=0.0,
    )


def episode(reward: float) -> Trajectory:
    return Trajectory(
        episode_id=f"e{reward}",
        task_id="t",
        env_id="env",
        policy="p",
        stop_reason=StopReason.DONE,
        turns=(turn(0, TURN0, OBS), turn(1, TURN1, ())),
        segments=(Segment(PROMPT, (), 0),),
        prompt_messages=(),
        reward=reward,
        success=reward > 0,
    )


def test_token_advantages_are_teacher_minus_sampler_on_sampled_tokens_only():
    assert opd.token_advantages([0.0, -0.5, -3.0, -0.25], [0.0, -1.0, 0.0, -0.5], [0, 1, 0, 1]) == [
        0.0,
        0.5,
        0.0,
        0.25,
    ]
    with pytest.raises(ValueError):
        opd.token_advantages([0.0], [0.0, 1.0], [1])


def test_distill_scores_each_turn_given_its_full_prompt_and_mixes_the_reward():
    """Rewards 1 and 0 in one group: GRPO gives +-1/sqrt(2) (std 0.7071); with
    opd_reward_coef 0.5 each sample carries +-0.35355, and its sampled tokens add
    teacher - sampler: 7: -0.5 - -1.0 = 0.5, 8: -2.5 - -2.0 = -0.5, 10: -0.25 - -0.5 = 0.25."""
    algorithm = AlgorithmConfig(advantage="opd", teacher="tiny", opd_reward_coef=0.5)
    group = Group(0, "t", 0, (episode(1.0), episode(0.0)))
    samples, advantages, _ = build_batch([group], algorithm)
    assert advantages == pytest.approx([0.5 / 2**0.5, -0.5 / 2**0.5], abs=1e-5)

    teacher = TableTeacher(TEACHER)
    assert isinstance(teacher, Scorer)
    distilled, stats = asyncio.run(opd.distill(samples, teacher))
    # One call per sample: the ids before the first sampled token, then all the rest.
    assert teacher.calls == [(PROMPT, (*TURN0, *OBS, *TURN1))] * 2
    for d in distilled:
        assert d.token_advantages == pytest.approx((0.0, 0.0, 0.5, -0.5, 0.0, 0.25))
        assert d.input_ids == (*PROMPT, *TURN0, *OBS, *TURN1)
    # The whole advantage of each sampled token, as the learner adds it up.
    total = [
        [a + t for t, m in zip(d.token_advantages, d.loss_mask, strict=True) if m]
        for d, a in zip(distilled, advantages, strict=True)
    ]
    assert total[0] == pytest.approx([0.5 + 0.353553, -0.5 + 0.353553, 0.25 + 0.353553], abs=1e-5)
    assert total[1] == pytest.approx([0.5 - 0.353553, -0.5 - 0.353553, 0.25 - 0.353553], abs=1e-5)
    # reverse KL = mean(sampler - teacher) over sampled tokens = (-0.5 + 0.5 - 0.25) / 3.
    assert stats.reverse_kl == pytest.approx(-0.25 / 3)
    assert stats.teacher_logprob == pytest.approx((-0.5 - 2.5 - 0.25) / 3)
    assert stats.tokens == 6
    assert stats.metrics()["opd/reverse_kl"] == pytest.approx(-0.25 / 3)


def test_pure_distillation_gives_samples_no_reward_advantage():
    group = Group(0, "t", 0, (episode(1.0), episode(0.0)))
    _, advantages, _ = build_batch([group], AlgorithmConfig(advantage="opd", teacher="tiny"))
    assert advantages == [0.0, 0.0]


def test_the_learner_weights_each_token_by_its_own_advantage():
    """cross_entropy, token mean: loss = -sum_t (A + a_t) * logp_t / tokens, with logp_t the
    model's own logprobs (read through its Scorer before the step)."""
    model, _ = load_model(ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=0))
    algorithm = AlgorithmConfig(loss="cross_entropy", advantage="opd", teacher="tiny")
    learner = Learner(model, LearnerSettings(algorithm=algorithm, optim=build_config().optim))
    ids, mask = (4, 5, 8, 9, 10, 11), (0, 0, 1, 1, 0, 1)
    per_token = (0.0, 0.0, 0.5, -0.5, 0.0, 0.25)
    logp = asyncio.run(learner.score(ids[:2], ids[2:]))  # for ids[2:], given what precedes
    # On-policy: the sampler's logprobs are the model's own (importance weights 1).
    sampler = tuple([0.0, 0.0] + [lp if m else 0.0 for lp, m in zip(logp, mask[2:], strict=True)])
    sample = TrainingSample(ids, mask, sampler, (0,) * 6, (0,) * 6, per_token)
    sampled = [lp for lp, m in zip(logp, mask[2:], strict=True) if m]
    token_adv = [a for a, m in zip(per_token[2:], mask[2:], strict=True) if m]
    expected = -sum((0.3 + a) * lp for a, lp in zip(token_adv, sampled, strict=True)) / 3
    stats = learner.train_step([sample], [0.3])
    assert stats.policy_loss == pytest.approx(expected, rel=1e-5)
    # Without per-token advantages the same sample is plain REINFORCE with A = 0.3.
    model2, _ = load_model(ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=0))
    plain = Learner(model2, LearnerSettings(algorithm=algorithm, optim=build_config().optim))
    flat = TrainingSample(ids, mask, sampler, (0,) * 6)
    assert plain.train_step([flat], [0.3]).policy_loss == pytest.approx(
        -0.3 * sum(sampled) / 3, rel=1e-5
    )


# -- config --------------------------------------------------------------------------------


def test_opd_without_a_teacher_is_a_one_line_error():
    with pytest.raises(ConfigError) as e:
        build_config({}, ["algorithm.advantage=opd"])
    message = str(e.value)
    assert "\n" not in message
    assert "algorithm.teacher is required when algorithm.advantage is 'opd'" in message
    with pytest.raises(ConfigError, match=r"only used with algorithm\.advantage 'opd'"):
        build_config({}, ["algorithm.teacher=tiny:1"])
    with pytest.raises(ConfigError, match="opd_reward_coef"):
        build_config(
            {}, ["algorithm.advantage=opd", "algorithm.teacher=x", "algorithm.opd_reward_coef=-1"]
        )
    cfg = build_config({}, ["algorithm.advantage=opd", "algorithm.teacher=tiny:3"])
    assert cfg.algorithm.opd_reward_coef == 0.0


def test_teacher_specs_resolve_to_models(tmp_path):
    cfg = build_config({}, ["model.source=lookup-tiny", "model.pretrain_steps=0", "seed=4"])
    tiny = opd.resolve_teacher("lookup-tiny:7", cfg)
    assert (tiny.model.source, tiny.model.pretrain_steps, tiny.seed) == (
        ModelSource.LOOKUP_TINY,
        0,
        7,
    )
    assert opd.resolve_teacher("tiny", cfg).model.source is ModelSource.TINY
    assert opd.resolve_teacher("tiny", cfg).seed == 4
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    hf = opd.resolve_teacher(str(tmp_path / "hf"), cfg)
    assert (hf.model.source, hf.model.path) == (ModelSource.PRETRAINED, str(tmp_path / "hf"))
    for bad in ("tiny:x", str(tmp_path / "missing"), str(tmp_path)):
        with pytest.raises(opd.TeacherError, match=r"algorithm\.teacher"):
            opd.resolve_teacher(bad, cfg)


def test_a_teacher_with_another_tokenizer_is_refused():
    cfg = build_config(
        {}, ["model.source=lookup-tiny", "algorithm.advantage=opd", "algorithm.teacher=tiny:0"]
    )
    _, student_tokenizer = load_model(ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=0))
    with pytest.raises(opd.TeacherError, match="another tokenizer"):
        opd.load_teacher(cfg, student_tokenizer)


# -- learning ------------------------------------------------------------------------------


@torch.no_grad()
def sample_completions(model, prompts: list[list[int]], n: int, tokens: int, seed: int):
    """`n` completions of `tokens` ids per prompt, sampled from `model` at temperature 1."""
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt] * n)
        for _ in range(tokens):
            probs = model(input_ids=ids).logits[:, -1].float().softmax(-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
        out.extend((prompt, row[len(prompt) :].tolist()) for row in ids)
    model.train()
    return out


async def reverse_kl(student: Scorer, teacher: Scorer, pairs) -> float:
    """Mean over sampled tokens of `log p_student - log p_teacher` (both through `Scorer`)."""
    total = count = 0.0
    for prompt, completion in pairs:
        s = await student.score(prompt, completion)
        t = await teacher.score(prompt, completion)
        total += sum(a - b for a, b in zip(s, t, strict=True))
        count += len(s)
    return total / count


def heldout_prompts(tokenizer) -> list[list[int]]:
    """Chat contexts the lookup env never opens with: random-word exchanges (echo corpus)."""
    prompts = []
    for chat in echo_corpus(6, seed=321):
        text = tokenizer.apply_chat_template(chat[:3], tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


def test_opd_moves_a_tiny_student_toward_its_teacher(tmp_path):
    """A random lookup-tiny student learns from a teacher warmed up on the echo corpus
    (the same architecture, trained): after 24 steps of OPD on the lookup env the per-token
    reverse KL on held-out chat contexts has fallen well below its start."""
    teacher_dir = tmp_path / "teacher"
    model, tokenizer = load_model(ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=400))
    model.save_pretrained(teacher_dir)
    tokenizer.save_pretrained(teacher_dir)
    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path / 'run'}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "model.pretrain_steps=0",
            "algorithm.advantage=opd",
            f"algorithm.teacher={teacher_dir}",
            "optim.lr=5e-3",
            "trainer.steps=24",
            "trainer.groups_per_step=4",
            "rollout.group_size=4",
            "logging.console=false",
            "logging.trajectories=false",
        ],
    )
    trainer = AsyncTrainer(cfg)
    prompts = heldout_prompts(tokenizer)
    judge = opd.load_teacher(cfg, tokenizer)
    before = asyncio.run(
        reverse_kl(
            trainer.learner, judge, sample_completions(trainer.learner.model, prompts, 8, 4, 0)
        )
    )
    result = trainer.run()
    assert isinstance(trainer.teacher, opd.FrozenScorer)  # built by the run, once
    after = asyncio.run(
        reverse_kl(
            trainer.learner, judge, sample_completions(trainer.learner.model, prompts, 8, 4, 0)
        )
    )
    kl = [row["opd/reverse_kl"] for row in result.history]
    print(f"held-out reverse KL {before:.3f} -> {after:.3f}; training batches {kl}")
    assert before > 0.5
    assert after < 0.5 * before
    assert sum(kl[-3:]) / 3 < 0.5 * kl[0]


def test_a_data_parallel_filler_carries_no_per_token_advantage():
    """Short ranks are padded with a copy of a sample at advantage 0: without its
    distillation advantages too, or the copy would train."""
    from skyrl_sdk.trainer.distributed_learner import shard_batch

    sample = TrainingSample((1, 2, 3), (0, 1, 1), (0.0, -1.0, -1.0), (0,) * 3, (), (0.0, 0.5, 0.5))
    local, adv = shard_batch([sample] * 3, [0.1, 0.2, 0.3], 1, 2)
    assert adv == [0.2, 0.0]
    assert local[0].token_advantages == (0.0, 0.5, 0.5)
    assert local[1].token_advantages == () and local[1].input_ids == sample.input_ids


def test_the_tinker_backend_refuses_opd_instead_of_ignoring_the_teacher():
    from skyrl_sdk.trainer.backends.tinker import check_config

    cfg = build_config({}, ["algorithm.advantage=opd", "algorithm.teacher=tiny:1"])
    with pytest.raises(ConfigError, match="the tinker backend does not train per-token"):
        check_config(cfg)


def test_one_of_our_runs_is_a_teacher_with_its_trained_weights(tmp_path):
    """`algorithm.teacher: RUN_DIR` builds the run's own model (its source, sizes and seed)
    with its last checkpoint on top: the teacher scores as the run's final learner."""
    run = build_config(
        {},
        [
            f"out_dir={tmp_path / 'teacher_run'}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "model.pretrain_steps=0",
            "seed=3",
            "optim.lr=1e-2",
            "trainer.steps=2",
            "trainer.groups_per_step=2",
            "rollout.group_size=4",
            "logging.console=false",
        ],
    )
    trained = AsyncTrainer(run)
    trained.run()
    student = build_config(
        {},
        [
            "model.source=lookup-tiny",
            "model.pretrain_steps=0",
            "algorithm.advantage=opd",
            f"algorithm.teacher={tmp_path / 'teacher_run'}",
        ],
    )
    resolved = opd.resolve_teacher(str(tmp_path / "teacher_run"), student)
    assert resolved.seed == 3 and resolved.model.init_from == str(tmp_path / "teacher_run")
    teacher = opd.load_teacher(student, trained.engine.renderer.tokenizer)
    prompt, completion = [1, 4, 7, 2], [1, 5, 8, 11, 2]
    expected = asyncio.run(trained.learner.score(prompt, completion))
    assert asyncio.run(teacher.score(prompt, completion)) == pytest.approx(expected, abs=1e-5)
    # Multi-turn, token-exact: on an episode the run played, every turn's advantages are the
    # teacher's scores of that turn's sampled ids given the ids before it (the turn's prompt).
    episodes = read_trajectories(tmp_path / "teacher_run" / "trajectories.jsonl")
    long = next(t for t in episodes if len(t.turns) >= 2 and len(t.segments) == 1)
    (sample,) = long.training_samples()
    (distilled,), _ = asyncio.run(opd.distill([sample], teacher))
    at = len(long.prompt_ids)
    for t in long.turns:
        prompt_ids = distilled.input_ids[:at]
        turn_scores = asyncio.run(teacher.score(prompt_ids, t.token_ids))
        expected_turn = [a - b for a, b in zip(turn_scores, t.logprobs, strict=True)]
        got = distilled.token_advantages[at : at + len(t.token_ids)]
        assert got == pytest.approx(expected_turn, abs=1e-5)
        assert set(
            distilled.token_advantages[
                at + len(t.token_ids) : at + len(t.token_ids) + len(t.observation_ids)
            ]
        ) <= {0.0}
        at += len(t.token_ids) + len(t.observation_ids)
    fresh, _ = load_model(student.model, seed=3)  # the untrained seed-3 model differs
    assert asyncio.run(opd.FrozenScorer(fresh).score(prompt, completion)) != pytest.approx(
        expected, abs=1e-3
    )


def test_skyrl_train_says_what_is_wrong_with_a_teacher_in_one_line(tmp_path):
    """A teacher that names nothing is refused before any model loads; one with another
    tokenizer when the run builds it. Both: one line, exit 2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    skyrl = Path(sys.executable).parent / "skyrl"
    base = [str(skyrl), "train", "-", "env.id=lookup", f"out_dir={tmp_path / 'run'}"]
    base += ["model.source=lookup-tiny", "model.pretrain_steps=0", "algorithm.advantage=opd"]
    env = {**os.environ, "COLUMNS": "300"}
    for teacher, says in (
        (str(tmp_path / "nowhere"), "is not a run, checkpoint or model directory"),
        ("tiny:0", "has another tokenizer than the student"),
    ):
        proc = subprocess.run(
            [*base, f"algorithm.teacher={teacher}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(lines) == 1 and says in lines[0], proc.stdout
        assert "Traceback" not in proc.stdout + proc.stderr


def test_batched_teacher_scores_are_each_sequence_scored_alone():
    """`FrozenScorer.score_batch` (right-padded forwards, what `distill` uses) gives every
    sequence of another length the logprobs `score` gives it alone."""
    model, _ = load_model(ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=0), seed=5)
    scorer = opd.FrozenScorer(model, batch_size=2)
    pairs = [([1, 4, 7], [2, 5]), ([1, 4, 7, 8, 9, 2], [1, 5, 11, 12]), ([3], [6, 7, 8])]
    batched = asyncio.run(scorer.score_batch(pairs))
    assert scorer.keeps_logits  # both project only the completions' positions
    for (prompt, completion), got in zip(pairs, batched, strict=True):
        alone = asyncio.run(scorer.score(prompt, completion))
        assert len(got) == len(completion)
        assert got == pytest.approx(alone, abs=1e-5)
        # ... and both are the full forward's logprobs of those tokens.
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        full = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]
        assert got == pytest.approx(full, abs=1e-5)


def test_a_shared_prompt_is_scored_once_for_the_whole_batch(monkeypatch):
    """Rows that share a prompt (a GRPO group's episodes) forward it once, its keys and values
    repeated for every row: each completion still gets the logprobs of a full forward."""
    from skyrl_sdk.trainer import model_forward

    model, _ = load_model(ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=0), seed=5)
    scorer = opd.FrozenScorer(model, batch_size=4)
    prompt = [1, 4, 7, 8, 9, 2] * 4  # 24 ids, above MIN_SHARED_PREFIX
    pairs = [(prompt, [2, 5]), (prompt, [1, 5, 11, 12]), (prompt, [6]), ([*prompt, 3], [6, 7])]
    calls = []
    real = model_forward._shared_prefix_logits
    monkeypatch.setattr(
        model_forward,
        "_shared_prefix_logits",
        lambda *a, **k: calls.append(a[4]) or real(*a, **k),  # the shared length
    )
    batched = asyncio.run(scorer.score_batch(pairs))
    assert calls == [len(prompt)]  # one batch, the prompt forwarded once
    for (p, completion), got in zip(pairs, batched, strict=True):
        ids = torch.tensor([p + completion])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        full = [logp[len(p) - 1 + i, t].item() for i, t in enumerate(completion)]
        assert got == pytest.approx(full, abs=1e-5)
