"""The weight-sync check: after every publish, the engine and the learner score a fixed probe.

SkyRL #2246 shipped an async mode whose engine kept its KV and prefix caches across weight
syncs: new tokens attended to keys and values of older weights, the sampler's logprobs drifted
from the trainer's (0.87 on average, 28.6 at worst) and nobody noticed for weeks. This check
makes such a bug stop the run at its first sync.

- The probe: a few stored sequences from the first step's episodes (`SyncCheck.calibrate`:
  evenly spread over the batch, so one per group; the tokens before each sample's first
  generated one are its prompt, up to `probe_max_tokens` of the rest its completion). The
  engine has just played them, so their prompts are in its prefix cache, and every check
  leaves them cached at its version (`LocalEngine.score` stores what it computes, as a
  rollout does): at the next sync an engine that kept stale keys and values reuses them.
- The floor: at the first version checked (before any training step changes the weights),
  both sides score the probe; their largest per-token difference is float rounding alone
  (`sync/floor`). `trainer.sync_check.max_gap` defaults to 10x that floor, at least
  `min_gap` (1e-4).
- Each sync (`SyncCheck.after_publish`, called by the loop right after
  `engine.update_weights` and before the gate lets the new version sample for training): the
  engine scores the probe through its rollout path (the local engine queues the scores
  behind the new weights, so they run before its next decoding step), the learner at the
  same version; `sync/logprob_gap_mean` and `sync/logprob_gap_max` (over every probe token)
  go into the step's metrics. A gap above the threshold, a non-finite one, or an engine
  that does not serve the published version fails the check: `on_fail: stop` raises
  `SyncCheckFailed` naming the gap, `warn` prints it.

Both sides are `agents.scoring.Scorer`s (the local engine, vLLM, Ray engine actors, Tinker's
sampling client; the torch learner, its Ray actor, Tinker's training client). With LoRA the version checked is the adapters':
the Tinker engine samples from adapters saved for sampling at each version, and its scores
are those adapters'. Parts that cannot score (the FSDP2 / DeepSpeed ranks of
`distributed_learner`, for now) are named once and the check is skipped.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from skyrl_sdk.agents.scoring import Scorer
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.config import SyncCheckConfig, SyncFailure


class SyncCheckFailed(RuntimeError):
    """The engine's logprobs of the probe differ from the learner's after a weight sync."""


@dataclass(frozen=True)
class ProbeSequence:
    """One stored sequence of the probe."""

    prompt_ids: tuple[int, ...]
    """The tokens before its first generated one (cached by the engine when it played it)."""
    completion_ids: tuple[int, ...]
    """The tokens scored: generated and observation tokens that follow, in order."""


@dataclass(frozen=True)
class SyncGap:
    """The engine's and the learner's scores of the probe compared at one version."""

    version: int
    """The policy version both sides scored."""
    engine_version: int
    """The version the engine served when its scores were done."""
    mean: float
    """Mean |engine - learner| logprob over every probe token."""
    max: float
    """Largest |engine - learner| logprob of any probe token."""
    tokens: int
    """Probe tokens compared."""


def probe_from(
    samples: Sequence[TrainingSample], count: int, max_tokens: int
) -> list[ProbeSequence]:
    """Up to `count` probe sequences from `samples`, evenly spread over them (a batch lists
    its groups in order: one sequence per group when there are enough)."""
    usable = [s for s in samples if 1 in s.loss_mask and s.loss_mask.index(1) > 0]
    if not usable:
        return []
    step = max(len(usable) / count, 1.0)
    picked = sorted({int(i * step) for i in range(count) if int(i * step) < len(usable)})
    probe = []
    for i in picked:
        s = usable[i]
        start = s.loss_mask.index(1)
        probe.append(ProbeSequence(s.input_ids[:start], s.input_ids[start : start + max_tokens]))
    return probe


class SyncCheck:
    """The check of one run (see the module docstring); the loop calls `calibrate` once
    with the first batch and `after_publish` after every publish."""

    def __init__(self, config: SyncCheckConfig, learner: Any, engine: Any, console: Console):
        self.config = config
        self.learner = learner
        self.engine = engine
        self.console = console
        missing = [
            f"the {role} ({type(part).__name__})"
            for role, part in (("engine", engine), ("learner", learner))
            if not isinstance(part, Scorer)
        ]
        self.active = config.enabled and not missing
        """Whether the check runs (enabled, and both sides can score)."""
        if config.enabled and missing:
            console.print(
                f"[yellow]note: no weight-sync check: {' and '.join(missing)} cannot score "
                "tokens (agents.scoring.Scorer)[/yellow]",
                soft_wrap=True,
            )
        self.probe: list[ProbeSequence] = []
        """The probe (empty until `calibrate`)."""
        self.floor: SyncGap | None = None
        """The comparison at the first version checked."""
        self.max_gap: float | None = config.max_gap
        """The threshold (set by `calibrate` when `max_gap` is not configured)."""
        self.gaps: list[SyncGap] = []
        """Every sync's comparison, in order."""
        self._metrics: dict[str, float] = {}

    async def calibrate(self, samples: Sequence[TrainingSample], version: int) -> None:
        """Take the probe from the first batch's `samples` and measure the floor at
        `version` (the weights that batch was sampled with; nothing trained yet)."""
        if not self.active or self.probe:
            return
        cfg = self.config
        self.probe = probe_from(samples, cfg.probe_sequences, cfg.probe_max_tokens)
        if not self.probe:
            return
        self.floor = await self.measure(version)
        if self.max_gap is None:
            self.max_gap = max(10 * self.floor.max, cfg.min_gap)
        self._metrics.update({"sync/floor": self.floor.max, "sync/max_gap": self.max_gap})
        self._fail_if_bad(self.floor, f"at version {version}, before training")

    async def after_publish(self, version: int) -> None:
        """Check the sync of `version` (just handed to the engine); raises `SyncCheckFailed`
        or warns when it fails."""
        if not self.active or not self.probe:
            return
        t0 = time.perf_counter()
        gap = await self.measure(version)
        self.gaps.append(gap)
        self._metrics.update(
            {
                "sync/logprob_gap_mean": gap.mean,
                "sync/logprob_gap_max": gap.max,
                "time/sync_check_s": time.perf_counter() - t0,
            }
        )
        self._fail_if_bad(gap, f"after the sync of version {version}")

    async def measure(self, version: int) -> SyncGap:
        """Both sides' scores of the probe, compared (the engine's are requested first: the
        local engine runs them right after loading the weights queued before them)."""
        engine = [self.engine.score(p.prompt_ids, p.completion_ids) for p in self.probe]
        engine_task = asyncio.gather(*engine)
        pairs = [(p.prompt_ids, p.completion_ids) for p in self.probe]
        if hasattr(self.learner, "score_batch"):  # the torch learner: padded, prompt shared
            learned = await self.learner.score_batch(pairs)
        else:
            learned = [await self.learner.score(prompt, c) for prompt, c in pairs]
        served = await engine_task
        diffs = [
            abs(a - b)
            for got, want in zip(served, learned, strict=True)
            for a, b in zip(got, want, strict=True)
        ]
        return SyncGap(
            version=version,
            engine_version=int(self.engine.policy_version),
            mean=sum(diffs) / max(len(diffs), 1),
            max=max(diffs, default=0.0),
            tokens=len(diffs),
        )

    def pop_metrics(self) -> dict[str, float]:
        """The metrics gathered since the last call (for the step's row)."""
        metrics, self._metrics = self._metrics, {}
        return metrics

    def _fail_if_bad(self, gap: SyncGap, when: str) -> None:
        problem = self._problem(gap)
        if problem is None:
            return
        message = f"weight-sync check failed {when}: {problem}"
        if self.config.on_fail is SyncFailure.STOP:
            raise SyncCheckFailed(message)
        self.console.print(f"[yellow]warning: {message}[/yellow]", soft_wrap=True)

    def _problem(self, gap: SyncGap) -> str | None:
        """What is wrong with `gap` (None: nothing)."""
        if gap.engine_version != gap.version:
            return (
                f"the engine serves version {gap.engine_version}, not the learner's {gap.version}"
            )
        threshold = self.max_gap if self.max_gap is not None else math.inf
        if math.isfinite(gap.max) and gap.max <= threshold:
            return None
        floor = ""
        if self.config.max_gap is None and self.floor is not None:
            floor = f" (10x the floor {self.floor.max:.2g} at version {self.floor.version})"
        return (
            f"engine and learner logprobs of the probe differ by up to {gap.max:.4g} (mean "
            f"{gap.mean:.4g} over {gap.tokens} tokens); trainer.sync_check.max_gap is "
            f"{threshold:.3g}{floor}. The engine is not sampling from the learner's weights: "
            "e.g. keys and values cached before the sync were reused (a prefix or KV cache "
            "not invalidated on update, SkyRL #2246) or the weights did not load"
        )
