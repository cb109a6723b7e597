"""`skyrl bench async`: synchronous vs asynchronous RL on heavy-tailed episode durations.

Workload: the `lookup` env with the tiny model (`AsyncTrainer`, one process, CPU). Every
assistant turn first waits a seeded, heavy-tailed (Pareto) latency that stands in for a slow
tool, a long generation or a straggling sandbox. The latency depends only on the episode id
and turn, so every run sees the same durations for the same episodes.

Measured: wall time of `AsyncTrainer.train()` for a fixed number of optimizer steps with
`max_staleness=0` (synchronous on-policy: each step waits for its slowest episode) and with
`max_staleness` 1, 2 and 4 (generation runs ahead, so one straggler no longer stalls the
whole batch). Same model, seed, data order and latencies in every run; one process, one run.

Last line: `{"sync_s": ..., "async_s": {"1": ..., "2": ..., "4": ...}, "speedup": {...}}`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.benchmarks.perf.report import BenchReport


@dataclass(frozen=True)
class AsyncBenchSettings:
    """Knobs of the workload (the defaults are what `skyrl bench async` runs)."""

    steps: int = 12
    """Optimizer steps per run."""
    groups_per_step: int = 4
    """Task groups per batch."""
    group_size: int = 4
    """Episodes per group."""
    stalenesses: tuple[int, ...] = (1, 2, 4)
    """Async settings compared with `max_staleness=0`."""
    latency_scale_s: float = 0.08
    """Pareto minimum of the per-turn latency, seconds."""
    latency_alpha: float = 1.2
    """Pareto tail index (smaller: heavier tail; <= 2 has infinite variance)."""
    latency_cap_s: float = 3.0
    """Cap of one turn's latency, seconds (keeps a single run bounded)."""
    pretrain_steps: int = 20
    """Echo warm-up steps of the tiny model (construction time, not measured)."""
    seed: int = 0
    """Run seed (model, data order, sampling, latencies)."""


def turn_latency(
    episode_id: str, turn: int, *, scale: float, alpha: float, cap: float, seed: int = 0
) -> float:
    """Seeded Pareto(scale, alpha) latency of one turn, capped at `cap` seconds."""
    h = zlib.crc32(f"{seed}:{episode_id}:{turn}".encode())
    u = (h + 0.5) / 2**32  # uniform in (0, 1)
    return min(scale * u ** (-1.0 / alpha), cap)


class LatencyPolicy:
    """Wraps a policy: sleeps `turn_latency(...)` before each generate call (async sleep)."""

    def __init__(self, inner: Any, settings: AsyncBenchSettings):
        self.inner = inner
        self.settings = settings
        self.name = getattr(inner, "name", "latency")
        self.total_sleep_s = 0.0
        """Sum of all injected latencies (for the report)."""

    @property
    def renderer(self) -> Any:
        return self.inner.renderer

    async def generate(self, prompt_token_ids: Sequence[int], sampling: Any, *, context=None):
        if context is not None:
            s = self.settings
            delay = turn_latency(
                context.episode_id,
                context.turn,
                scale=s.latency_scale_s,
                alpha=s.latency_alpha,
                cap=s.latency_cap_s,
                seed=s.seed,
            )
            self.total_sleep_s += delay
            await asyncio.sleep(delay)
        return await self.inner.generate(prompt_token_ids, sampling, context=context)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass(frozen=True)
class RunTiming:
    """One measured training run."""

    staleness: int
    """`max_staleness` of the run."""
    wall_s: float
    """Wall time of `train()` (all steps)."""
    steps: int
    """Optimizer steps completed."""
    staleness_max: int
    """Largest token staleness seen by the learner."""
    injected_s: float
    """Total injected latency over all episodes generated (including unfinished ones)."""
    reward_mean: float
    """Mean reward over all steps (sanity: the runs learn the same task)."""


def time_run(settings: AsyncBenchSettings, staleness: int, out_dir: Path) -> RunTiming:
    """Train `settings.steps` steps at `max_staleness=staleness`; time `train()` only."""
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer
    from skyrl_sdk.trainer.config import build_config

    cfg = build_config(
        {},
        [
            f"out_dir={out_dir}",
            f"seed={settings.seed}",
            f"trainer.steps={settings.steps}",
            f"trainer.groups_per_step={settings.groups_per_step}",
            f"trainer.max_staleness={staleness}",
            "trainer.torch_threads=1",
            f"rollout.group_size={settings.group_size}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            f"model.pretrain_steps={settings.pretrain_steps}",
            "logging.console=false",
            "logging.jsonl=false",
            "logging.trajectories=false",
        ],
    )
    trainer = AsyncTrainer(cfg)
    policy = LatencyPolicy(trainer.policy, settings)
    trainer.policy = policy
    start = time.perf_counter()
    result = asyncio.run(trainer.train())
    wall = time.perf_counter() - start
    rewards = [m["reward/mean"] for m in result.history]
    return RunTiming(
        staleness=staleness,
        wall_s=wall,
        steps=result.steps,
        staleness_max=max((int(m["staleness/max"]) for m in result.history), default=0),
        injected_s=policy.total_sleep_s,
        reward_mean=sum(rewards) / max(len(rewards), 1),
    )


def measure(settings: AsyncBenchSettings | None = None) -> tuple[dict[str, Any], list[RunTiming]]:
    """Run sync then every async setting; returns (JSON result, timings)."""
    settings = settings or AsyncBenchSettings()
    timings: list[RunTiming] = []
    with tempfile.TemporaryDirectory(prefix="skyrl-bench-async-") as tmp:
        for staleness in (0, *settings.stalenesses):
            timings.append(time_run(settings, staleness, Path(tmp) / f"s{staleness}"))
    sync = timings[0].wall_s
    result: dict[str, Any] = {
        "sync_s": round(sync, 3),
        "async_s": {str(t.staleness): round(t.wall_s, 3) for t in timings[1:]},
        "speedup": {str(t.staleness): round(sync / t.wall_s, 3) for t in timings[1:]},
        "staleness_max": {str(t.staleness): t.staleness_max for t in timings[1:]},
        "steps": settings.steps,
        "episodes_per_step": settings.groups_per_step * settings.group_size,
    }
    return result, timings


def run() -> BenchReport:
    """`skyrl bench async`."""
    settings = AsyncBenchSettings()
    result, timings = measure(settings)
    sync = timings[0]
    rows: list[tuple[str, str, str]] = [
        (
            f"wall s, {settings.steps} steps, max_staleness={t.staleness} "
            f"(seen {t.staleness_max}, reward {t.reward_mean:.2f})",
            f"{t.wall_s:.2f}",
            f"{sync.wall_s:.2f}",
        )
        for t in timings[1:]
    ]
    rows += [
        (f"speedup at staleness {k}", f"{v:.2f}x", "1.00x") for k, v in result["speedup"].items()
    ]
    notes = [
        f"baseline: max_staleness=0 (synchronous, reward {sync.reward_mean:.2f}); "
        f"{settings.groups_per_step} groups x {settings.group_size} episodes per step, "
        "tiny model on the `lookup` env, one process",
        f"per-turn latency: Pareto(min {settings.latency_scale_s}s, alpha "
        f"{settings.latency_alpha}), capped at {settings.latency_cap_s}s, seeded by episode id",
        "target: speedup >= 2x at staleness 4",
    ]
    return BenchReport("async", rows, result, notes)
