"""One training step's batch: which finished groups the learner takes (`pick_batch`), their
samples with one advantage each (`build_batch`), and the step's metrics (`step_metrics`).

Pure functions of finished `Group`s, tested directly; the loop (`trainer.loop`) calls them in
this order every step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from skyrl_sdk.agents.trajectory import StopReason, TrainingSample, Trajectory
from skyrl_sdk.trainer import advantages as adv_fns
from skyrl_sdk.trainer.config import AdvantageEstimator, AlgorithmConfig
from skyrl_sdk.trainer.learner import LearnerStats


@dataclass(frozen=True)
class Group:
    """The finished episodes of one task (one GRPO group)."""

    index: int
    """Position in the run's data order (`DataCursor`)."""
    task_id: str
    """The task all episodes played."""
    admitted_version: int
    """Learner version when generation started (every token is at least this version)."""
    trajectories: tuple[Trajectory, ...]
    """The episodes, in sample order."""


def flat_groups(groups: Sequence[Group]) -> list[float]:
    """The shared reward of each group whose episodes all got the same one (a group without
    reward variance has zero advantage everywhere)."""
    out = []
    for g in groups:
        rewards = {t.reward for t in g.trajectories}
        if len(rewards) == 1:
            out.append(rewards.pop())
    return out


def pick_batch(
    finished: Mapping[int, int],
    running: Iterable[int],
    version: int,
    groups_per_step: int,
    max_staleness: int,
) -> list[int] | None:
    """The groups to train at learner `version`, or None to wait for more to finish.

    `finished` maps group index -> admitted version; `running` holds the admitted versions of
    groups still generating. A group admitted at version u must be trained at version
    <= u + max_staleness. Finished groups are taken earliest admitted first, and only if every
    group left behind can still meet its bound in later steps: for k = 0..max_staleness, at
    most k * groups_per_step of them were admitted at versions <= version - max_staleness + k.
    (Taking fast young groups while several old ones still run would otherwise leave more
    overdue groups than one batch holds.) Admission control keeps this always reachable.
    """
    if len(finished) < groups_per_step:
        return None
    ordered = sorted(finished, key=lambda i: (finished[i], i))
    left = [finished[i] for i in ordered[groups_per_step:]] + list(running)
    for k in range(max_staleness + 1):
        limit = version - max_staleness + k
        if sum(v <= limit for v in left) > k * groups_per_step:
            return None
    return ordered[:groups_per_step]


def build_batch(
    groups: Sequence[Group], algorithm: AlgorithmConfig
) -> tuple[list[TrainingSample], list[float], list[float]]:
    """Samples with one advantage each, from finished groups.

    Returns (samples, advantage per sample, advantage per episode). With `advantage: opd` the
    advantage is `opd_reward_coef` times GRPO's (the teacher's per-token part is added by
    `trainer.opd.distill`). Episodes without exact
    sampled ids (failed at reset, text-only) still count in their group's baseline but add no
    samples. With `filter_zero_variance`, groups whose rewards are all equal are left out
    (unless that would leave nothing).
    """
    rewards = torch.tensor(
        [[t.reward for t in g.trajectories] for g in groups], dtype=torch.float64
    )
    if algorithm.advantage is AdvantageEstimator.RLOO:
        adv = adv_fns.rloo_advantages(rewards)
    else:
        adv = adv_fns.grpo_advantages(
            rewards, normalize_std=algorithm.advantage is not AdvantageEstimator.DR_GRPO
        )
    distilling = algorithm.advantage is AdvantageEstimator.OPD
    if distilling:
        # The task reward's share; the teacher's per-token part comes later (`trainer.opd`).
        adv = adv * algorithm.opd_reward_coef
    keep = [True] * len(groups)
    # Under distillation a group without reward variance still has a signal in every token.
    if algorithm.filter_zero_variance and not distilling:
        mask = adv_fns.nonzero_variance_groups(rewards).tolist()
        if any(mask):
            keep = mask
    samples: list[TrainingSample] = []
    per_sample: list[float] = []
    per_episode: list[float] = []
    for g, row, kept in zip(groups, adv.tolist(), keep, strict=True):
        per_episode.extend(row)
        if not kept:
            continue
        for trajectory, a in zip(g.trajectories, row, strict=True):
            if not trajectory.trainable:
                continue
            for sample in trajectory.training_samples():
                if any(sample.loss_mask):
                    samples.append(sample)
                    per_sample.append(float(a))
    if not samples:
        failed = next((t for g in groups for t in g.trajectories if t.error), None)
        why = f"; the first error: {failed.stop_reason.value}: {failed.error}" if failed else ""
        raise RuntimeError(
            f"no trainable samples in this batch (every episode failed or was text-only{why})"
        )
    return samples, per_sample, per_episode


def step_metrics(
    groups: Sequence[Group], stats: LearnerStats, advantages: Sequence[float], version: int
) -> dict[str, Any]:
    """Flat metrics of one step from its groups and the learner's stats."""
    episodes = [t for g in groups for t in g.trajectories]
    n = max(len(episodes), 1)
    rewards = [t.reward for t in episodes]
    adv = torch.tensor(list(advantages) or [0.0], dtype=torch.float64)
    stops = Counter(t.stop_reason for t in episodes)
    out: dict[str, Any] = {
        "version": version,
        "reward/mean": sum(rewards) / n,
        "reward/min": min(rewards, default=0.0),
        "reward/max": max(rewards, default=0.0),
        "success/rate": sum(t.success for t in episodes) / n,
        "advantage/mean": float(adv.mean()),
        "advantage/abs_mean": float(adv.abs().mean()),
        "advantage/std": float(adv.std()) if adv.numel() > 1 else 0.0,
        "loss/total": stats.loss,
        "loss/policy": stats.policy_loss,
        "loss/observation": stats.observation_loss,
        "loss/logit_kl": stats.logit_kl,
        "policy/kl_ref": stats.kl_ref,
        "policy/kl_sampler": stats.kl_sampler,
        "policy/entropy": stats.entropy,
        "policy/clip_fraction": stats.clip_fraction,
        "policy/tis_clip_fraction": stats.tis_clip_fraction,
        "policy/ratio_mean": stats.ratio_mean,
        "optim/grad_norm": stats.grad_norm,
        "optim/lr": stats.lr,
        "staleness/mean": stats.staleness_mean,
        "staleness/max": stats.staleness_max,
        "tokens/generated": sum(t.num_generated_tokens for t in episodes),
        "tokens/trained": stats.tokens,
        "throughput/train_tokens_per_s": stats.tokens / max(stats.duration_s, 1e-9),
        "episode/turns": sum(len(t.turns) for t in episodes) / n,
        "episode/parse_errors": sum(t.parse_errors for t in episodes) / n,
        "episode/duration_s": sum(t.duration_s for t in episodes) / n,
        "time/gen_s": sum(turn.llm_s for t in episodes for turn in t.turns),
        "time/env_s": sum(turn.env_s for t in episodes for turn in t.turns),
        "groups": [g.index for g in groups],
        "tasks": [g.task_id for g in groups],
    }
    for reason in StopReason:
        out[f"stop/{reason.value}"] = stops.get(reason, 0) / n
    return out
