"""`skyrl bench rollout --json`: the last line is one JSON object with the promised keys."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

KEYS = {
    "episodes_per_s",
    "env_steps_per_s",
    "append_ms_per_turn_8",
    "append_ms_per_turn_128",
    "append_growth_128_vs_8",
    "bare_episodes_per_s",
    "vs_bare",
    "instant_episodes_per_s",
    "vs_bare_instant",
    "vs_bare_cpu",
    "vs_bare_instant_cpu",
}


@pytest.mark.slow
def test_bench_rollout_json_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "bench", "rollout", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == KEYS
    assert result["episodes_per_s"] > 0 and result["env_steps_per_s"] >= result["episodes_per_s"]
    # Append-only bookkeeping does not grow with the history (generous bound: noisy machines).
    assert result["append_growth_128_vs_8"] < 2.0
    assert result["bare_episodes_per_s"] > 0
    assert result["vs_bare"] == pytest.approx(
        result["episodes_per_s"] / result["bare_episodes_per_s"], rel=0.01
    )
    assert result["vs_bare_instant"] == pytest.approx(
        result["instant_episodes_per_s"] / result["bare_episodes_per_s"], rel=0.01
    )
    # Which of the two policies costs less CPU is a timing, and timings belong to the bench's
    # table, not to a test (under a loaded CI host they crossed: 0.434 against 0.415). The loop
    # does the bare loop's work and more, so neither ratio can be far above 1.
    assert 0 < result["vs_bare_cpu"] < 1.5
    assert 0 < result["vs_bare_instant_cpu"] < 1.5
