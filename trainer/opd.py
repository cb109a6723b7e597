"""On-policy distillation (`algorithm.advantage: opd`): a teacher grades every token the
student sampled.

The student plays episodes through the ordinary loop (`trainer.loop`: multi-turn,
token-exact). Before each training step a teacher, any `agents.scoring.Scorer` (a frozen torch
model here, `FrozenScorer`; a `LocalEngine`, a learner or a Tinker client score the same way),
scores each training sample: the ids before its first sampled token are the prompt, the rest
the completion. A causal scorer conditions every token on all ids before it, so one call per
segment scores each turn's sampled tokens given that turn's full prompt (the opening prompt,
earlier turns and the env's observations), exactly as the student saw it.

Per sampled token t (loss mask 1), the advantage is

    A_t = log p_teacher(x_t | x_<t) - log p_sampler(x_t | x_<t)  +  c * A_grpo(episode)

the negative of the per-token reverse-KL estimate `log p_student - log p_teacher` (its
expectation over the student's own samples is -KL(student || teacher)), plus, with
`algorithm.opd_reward_coef` c > 0, GRPO's advantage of the episode's task reward
(`trainer.batch.build_batch` gives each sample c * A_grpo; the per-token part travels in
`TrainingSample.token_advantages`, which every torch learner adds to it). Tokens off the loss
mask (prompt, observations) get 0. The sampler's logprobs are those of the distribution that
sampled (at `rollout.temperature`; the default 1 makes the estimate the model's reverse KL).
`opd/reverse_kl` is the mean of `log p_sampler - log p_teacher` over the batch's sampled tokens.

With `algorithm.opd_logit_kl_coef` > 0 the same teacher forward also keeps, at every sampled
position, the teacher's `opd_top_k` most likely ids and their logprobs
(`TrainingSample.teacher_top_ids` / `_logprobs`), and the learner adds that coefficient times
the forward KL from them to the student's distribution (`losses.logit_kl`): the advantage says
how good the sampled token was, the logit term which tokens the teacher would have sampled
there, so a student far from its teacher is told where its own episodes should have gone.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.scoring import Scorer
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.config import AdvantageEstimator, ModelConfig, ModelSource, TrainConfig

if TYPE_CHECKING:
    from skyrl_sdk.trainer.model_forward import ScoredCompletion

_TINY_SOURCES = {"tiny": ModelSource.TINY, "lookup-tiny": ModelSource.LOOKUP_TINY}


class TeacherError(ValueError):
    """`algorithm.teacher` names no model this run can load, or one with another tokenizer."""


@dataclass(frozen=True)
class TeacherModel:
    """What a teacher spec resolves to: the model to build, as `model` would build it."""

    model: ModelConfig
    """Source, sizes and `init_from` of the teacher (LoRA off: it is never trained)."""
    seed: int
    """The seed its model is built with (it picks the weights of the tiny sources)."""


@dataclass(frozen=True)
class DistillStats:
    """One batch's distillation numbers (the step's `opd/*` metrics)."""

    reverse_kl: float
    """Mean over sampled tokens of `log p_sampler - log p_teacher`."""
    teacher_logprob: float
    """Mean teacher logprob of the sampled tokens."""
    tokens: int
    """Sampled tokens scored."""
    duration_s: float
    """Seconds the teacher took to score the batch."""

    def metrics(self) -> dict[str, float]:
        """The step's metrics."""
        return {
            "opd/reverse_kl": self.reverse_kl,
            "opd/teacher_logprob": self.teacher_logprob,
            "opd/tokens": float(self.tokens),
            "time/teacher_s": self.duration_s,
        }


def resolve_teacher(spec: str, config: TrainConfig) -> TeacherModel:
    """The model `algorithm.teacher` names (see `AlgorithmConfig.teacher`); `TeacherError`
    when it names none."""
    spec = spec.strip()
    name, _, seed_text = spec.partition(":")
    dtype = config.model.dtype
    if name in _TINY_SOURCES:
        try:
            seed = int(seed_text) if seed_text else config.seed
        except ValueError:
            raise TeacherError(
                f"algorithm.teacher: {spec!r}: the seed must be an integer"
            ) from None
        source = _TINY_SOURCES[name]
        # The run's sizes when the student is the same tiny model, else the source's defaults.
        sizes = config.model if config.model.source is source else ModelConfig(source=source)
        model = ModelConfig(
            source=source,
            hidden_size=sizes.hidden_size,
            num_layers=sizes.num_layers,
            pretrain_steps=sizes.pretrain_steps,
            dtype=dtype,
        )
        return TeacherModel(model, seed)
    if spec == "smollm2":
        return TeacherModel(ModelConfig(source=ModelSource.SMOLLM2, dtype=dtype), config.seed)
    path = Path(spec).expanduser()
    if (path / "config.json").is_file():
        model = ModelConfig(source=ModelSource.PRETRAINED, path=str(path), dtype=dtype)
        return TeacherModel(model, config.seed)
    if path.exists():
        from skyrl_sdk.trainer.init_from import InitFromError, resolve_checkpoint

        try:
            found = resolve_checkpoint(path)
        except InitFromError as e:
            raise TeacherError(f"algorithm.teacher: {e}".replace("model.init_from: ", "")) from None
        if found.run_config is None:
            raise TeacherError(
                f"algorithm.teacher: {spec!r}: the checkpoint's run has no config.yaml (which "
                "names its model)"
            )
        run = found.run_config
        lora_off = run.model.lora.model_copy(update={"enabled": False})
        model = run.model.model_copy(update={"init_from": str(path), "lora": lora_off})
        return TeacherModel(model, run.seed)
    raise TeacherError(
        f"algorithm.teacher: {spec!r} is not a run, checkpoint or model directory, "
        "'smollm2', or 'tiny[:SEED]' / 'lookup-tiny[:SEED]'"
    )


class FrozenScorer:
    """A `Scorer` over a frozen transformers model: eval mode, no gradients, raw logits (no
    temperature), one forward at a time; `score_batch` scores many sequences in right-padded
    forwards of `batch_size`."""

    def __init__(self, model: Any, name: str = "teacher", batch_size: int = 8):
        from skyrl_sdk.trainer.model_forward import keeps_logits

        self.model = model.eval().requires_grad_(False)
        self.keeps_logits = keeps_logits(model)
        """Whether the model projects only the positions asked for (`logits_to_keep`)."""
        self.name = name
        self.batch_size = batch_size
        self._lock = threading.Lock()

    async def score_batch(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
    ) -> list[list[float]]:
        """`score` of each (prompt, completion) pair, `batch_size` sequences a forward."""
        scored = await self.score_batch_top_k(pairs, 0)
        return [list(t.logprobs) for t in scored]

    async def score_batch_top_k(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], k: int
    ) -> list[ScoredCompletion]:
        """`score_batch`, and with `k` > 0 also the teacher's `k` most likely ids (and their
        logprobs) at each completion token's position."""
        listed = [(list(p), list(c)) for p, c in pairs]
        return await asyncio.to_thread(self._score_batch, listed, k)

    def _score_batch(
        self, pairs: list[tuple[list[int], list[int]]], k: int
    ) -> list[ScoredCompletion]:
        from skyrl_sdk.trainer.model_forward import score_pairs

        with self._lock:
            return score_pairs(self.model, pairs, batch_size=self.batch_size, top_k=k)

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Each completion token's logprob given the prompt and the completion before it."""
        return await asyncio.to_thread(self._score, list(prompt_ids), list(completion_ids))

    def _score(self, prompt: list[int], completion: list[int]) -> list[float]:
        return list(self._score_batch([(prompt, completion)], 0)[0].logprobs)


def load_teacher(
    config: TrainConfig, tokenizer: Any = None, spec: str | None = None
) -> FrozenScorer:
    """The run's teacher (`spec`, by default `algorithm.teacher`; `skyrl sft` passes
    `sft.teacher`), built once, frozen; with the student's `tokenizer`, `TeacherError` unless
    the teacher's has the same vocabulary (the advantages compare the two models on the same
    token ids)."""
    from skyrl_sdk.trainer.models import load_model

    field = "algorithm.teacher" if spec is None else "sft.teacher"
    spec = config.algorithm.teacher if spec is None else spec
    if not spec:
        raise TeacherError("algorithm.teacher is required when algorithm.advantage is 'opd'")
    try:
        teacher = resolve_teacher(spec, config)
    except TeacherError as e:
        raise TeacherError(str(e).replace("algorithm.teacher", field)) from None
    model, teacher_tokenizer = load_model(teacher.model, seed=teacher.seed)
    if tokenizer is not None and _vocab(teacher_tokenizer) != _vocab(tokenizer):
        raise TeacherError(
            f"{field}: {spec!r} has another tokenizer than the student "
            f"(model.source={config.model.source.value}); distillation compares the two "
            "models token by token, so they must share one"
        )
    return FrozenScorer(model, name=f"teacher:{spec}")


async def teacher_for(config: TrainConfig, engine: Any) -> Scorer | None:
    """The run's teacher under `advantage: opd` (`load_teacher`, checked against the
    tokenizer of `engine`'s renderer; loaded off the event loop), else None."""
    if config.algorithm.advantage is not AdvantageEstimator.OPD:
        return None
    tokenizer = getattr(getattr(engine, "renderer", None), "tokenizer", None)
    return await asyncio.to_thread(load_teacher, config, tokenizer)


def _vocab(tokenizer: Any) -> dict[str, int]:
    return dict(tokenizer.get_vocab())


def token_advantages(
    teacher: Sequence[float], sampler: Sequence[float], mask: Sequence[int]
) -> list[float]:
    """Per token: `teacher - sampler` where `mask` is 1, else 0.0 (aligned lists)."""
    if not len(teacher) == len(sampler) == len(mask):
        raise ValueError("teacher, sampler logprobs and mask must be aligned")
    return [float(t - s) if m else 0.0 for t, s, m in zip(teacher, sampler, mask, strict=True)]


async def distill(
    samples: Sequence[TrainingSample], teacher: Scorer, top_k: int = 0
) -> tuple[list[TrainingSample], DistillStats]:
    """`samples` with their per-token distillation advantages (`token_advantages`), scored
    by `teacher` (each sample as its ids before the first sampled token, then the rest, see
    the module docstring; a `FrozenScorer` takes them in padded batches, any other `Scorer`
    one call a sample), and the batch's stats. With `top_k` > 0 each sampled position also
    gets the teacher's `top_k` most likely ids and their logprobs (`teacher_top_ids` /
    `teacher_top_logprobs`, for `losses.logit_kl`); that needs a `FrozenScorer`."""
    started = time.perf_counter()
    starts = [_first_sampled(s) for s in samples]
    pairs = [(s.input_ids[:k], s.input_ids[k:]) for s, k in zip(samples, starts, strict=True)]
    if isinstance(teacher, FrozenScorer):  # padded batches instead of one forward a sample
        scores = await teacher.score_batch_top_k(pairs, top_k)
    elif top_k:
        raise TeacherError(
            "algorithm.opd_logit_kl_coef needs the teacher's whole next-token distribution: "
            f"a local model teacher, not {type(teacher).__name__}"
        )
    else:
        from skyrl_sdk.trainer.model_forward import ScoredCompletion

        scored = await asyncio.gather(*(teacher.score(p, c) for p, c in pairs))
        scores = [ScoredCompletion(tuple(x)) for x in scored]
    out: list[TrainingSample] = []
    kl = teacher_sum = 0.0
    tokens = 0
    for sample, k, scored in zip(samples, starts, scores, strict=True):
        if len(scored.logprobs) != len(sample.input_ids) - k:
            raise RuntimeError(
                f"the teacher returned {len(scored.logprobs)} logprobs for "
                f"{len(sample.input_ids) - k} tokens"
            )
        teacher_lp = [0.0] * k + [float(x) for x in scored.logprobs]
        per_token = token_advantages(teacher_lp, sample.logprobs, sample.loss_mask)
        sample = replace(sample, token_advantages=tuple(per_token))
        if top_k:
            sample = _with_top_tokens(sample, k, scored)
        out.append(sample)
        for t, s, m in zip(teacher_lp, sample.logprobs, sample.loss_mask, strict=True):
            if m:
                kl += s - t
                teacher_sum += t
                tokens += 1
    n = max(tokens, 1)
    return out, DistillStats(kl / n, teacher_sum / n, tokens, time.perf_counter() - started)


async def with_top_tokens(
    samples: Sequence[TrainingSample], teacher: FrozenScorer, top_k: int
) -> list[TrainingSample]:
    """`samples` with the teacher's `top_k` most likely ids and their logprobs on their
    trained ids (`teacher_top_ids` / `teacher_top_logprobs`) and nothing else changed: the
    logit term alone, for data the student did not sample (`skyrl sft` with `sft.teacher`)."""
    starts = [_first_sampled(s) for s in samples]
    pairs = [(s.input_ids[:k], s.input_ids[k:]) for s, k in zip(samples, starts, strict=True)]
    scores = await teacher.score_batch_top_k(pairs, top_k)
    return [
        _with_top_tokens(s, k, scored) for s, k, scored in zip(samples, starts, scores, strict=True)
    ]


def _with_top_tokens(sample: TrainingSample, k: int, scored: ScoredCompletion) -> TrainingSample:
    """`sample` with the teacher's top ids and logprobs on its sampled ids (`()` elsewhere:
    the prompt and the env's observations are not the student's to match)."""
    mask = sample.loss_mask[k:]
    top_ids = tuple(ids if m else () for ids, m in zip(scored.top_ids, mask, strict=True))
    top_lps = tuple(lp if m else () for lp, m in zip(scored.top_logprobs, mask, strict=True))
    nothing: tuple[tuple[int, ...], ...] = ((),) * k
    return replace(
        sample, teacher_top_ids=nothing + top_ids, teacher_top_logprobs=((),) * k + top_lps
    )


async def distill_batch(
    samples: Sequence[TrainingSample], teacher: Scorer | None, top_k: int = 0
) -> tuple[list[TrainingSample], dict[str, float]]:
    """The loop's step: `distill` and its metrics, or the samples as they are (no teacher)."""
    if teacher is None:
        return list(samples), {}
    distilled, stats = await distill(samples, teacher, top_k)
    return distilled, stats.metrics()


def _first_sampled(sample: TrainingSample) -> int:
    """Index of the sample's first sampled id (there is a prompt before it)."""
    if 1 not in sample.loss_mask:
        raise ValueError("a training sample without sampled tokens has nothing to distil")
    k = sample.loss_mask.index(1)
    if k == 0:
        raise ValueError("a training sample must start with prompt ids before its sampled ones")
    return k
