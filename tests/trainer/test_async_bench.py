"""`skyrl bench async` with tiny settings: the measured path runs and reports every key."""

import asyncio
from dataclasses import dataclass

from skyrl_sdk.benchmarks.perf import BENCHMARKS
from skyrl_sdk.benchmarks.perf.async_rl import (
    AsyncBenchSettings,
    LatencyPolicy,
    measure,
    turn_latency,
)


def test_turn_latency_is_seeded_heavy_tailed_and_capped():
    draws = [turn_latency(f"e{i}", 0, scale=0.01, alpha=1.2, cap=1.0) for i in range(2000)]
    assert draws == [turn_latency(f"e{i}", 0, scale=0.01, alpha=1.2, cap=1.0) for i in range(2000)]
    assert min(draws) >= 0.01 and max(draws) <= 1.0
    median = sorted(draws)[len(draws) // 2]
    assert max(draws) > 20 * median  # a heavy tail
    assert turn_latency("e1", 0, scale=0.01, alpha=1.2, cap=1.0, seed=1) != draws[1]


def test_latency_policy_sleeps_then_delegates():
    @dataclass
    class Ctx:
        episode_id: str
        turn: int

    class Inner:
        name = "inner"
        renderer = None

        async def generate(self, ids, sampling, *, context=None):
            return list(ids)

    policy = LatencyPolicy(Inner(), AsyncBenchSettings(latency_scale_s=0.001, latency_cap_s=0.01))
    out = asyncio.run(policy.generate([1, 2], None, context=Ctx("ep", 0)))
    assert out == [1, 2] and 0.001 <= policy.total_sleep_s <= 0.01


def test_bench_async_runs_with_tiny_settings():
    assert BENCHMARKS["async"] == "skyrl_sdk.benchmarks.perf.async_rl:run"
    settings = AsyncBenchSettings(
        steps=2,
        groups_per_step=2,
        group_size=2,
        stalenesses=(1,),
        latency_scale_s=0.001,
        latency_cap_s=0.01,
        pretrain_steps=0,
    )
    result, timings = measure(settings)
    assert set(result) >= {"sync_s", "async_s", "speedup"}
    assert set(result["async_s"]) == set(result["speedup"]) == {"1"}
    assert [t.staleness for t in timings] == [0, 1]
    assert all(t.steps == 2 for t in timings)
    assert timings[0].staleness_max == 0 and timings[1].staleness_max <= 1
    assert result["staleness_max"] == {"1": timings[1].staleness_max}
    assert result["sync_s"] > 0 and result["speedup"]["1"] > 0
