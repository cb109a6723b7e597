"""`skyrl bench env`: make + reset + one answer step, ours against PyPI `skyrl-gym`'s gsm8k.

Both sides do the same work per episode: build the env from the registry, start it on a task,
and score one final answer (correct, so the full reward path runs). Ours is `math-answer`
(through `make`, so with its order-enforcing, turn-limit and episode-stats wrappers); the peer
is `skyrl_gym.make("gsm8k")` + `init` + `step`, run in its own virtualenv. Rounds alternate
between the two to spread machine noise; the median round counts.
"""

from __future__ import annotations

import statistics
import time

from benchmarks.peer_venv import PeerUnavailable, run_in_peer
from benchmarks.report import BenchReport

ROUNDS = 5
ROUND_SECONDS = 1.0

PEER_SCRIPT = r"""
import json, sys, time
import skyrl_gym
question = "A farmer plants 22 rows of 11 apple trees and later sells 27 trees. How many are left?"
chat = [{"role": "user", "content": question}]
extras = {"reward_spec": {"method": "rule", "ground_truth": "215"}}
action = "22 * 11 = 242 and 242 - 27 = 215.\n#### 215"
def once():
    env = skyrl_gym.make("gsm8k", env_config={}, extras=extras)
    env.init(chat)
    out = env.step(action)
    assert out["reward"] == 1.0, out
    env.close()
for _ in range(2000):
    once()
seconds = float(sys.argv[1])
n, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    for _ in range(500):
        once()
    n += 500
print(json.dumps({"steps_per_s": n / (time.perf_counter() - start)}))
"""


def _ours(seconds: float) -> float:
    import skyrl_gym

    task = {
        "task_id": "bench",
        "question": "A farmer plants 22 rows of 11 apple trees and later sells 27 trees. How many are left?",
        "answer": "215",
    }
    options = {"task": task}
    action = "22 * 11 = 242 and 242 - 27 = 215.\n#### 215"

    def once() -> None:
        env = skyrl_gym.make("math-answer")
        env.reset(options=options)
        _, reward, terminated, _, _ = env.step(action)
        assert reward == 1.0 and terminated
        env.close()

    for _ in range(2000):
        once()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(500):
            once()
        n += 500
    return n / (time.perf_counter() - start)


def run() -> BenchReport:
    ours_rounds: list[float] = []
    peer_rounds: list[float] = []
    peer_error = None
    for _ in range(ROUNDS):
        ours_rounds.append(_ours(ROUND_SECONDS))
        if peer_error is None:
            try:
                peer_rounds.append(
                    run_in_peer("skyrl-gym", PEER_SCRIPT, str(ROUND_SECONDS))["steps_per_s"]
                )
            except PeerUnavailable as e:
                peer_error = str(e).splitlines()[0]
    ours = statistics.median(ours_rounds)
    peer = statistics.median(peer_rounds) if peer_rounds else None
    ratio = ours / peer if peer else None
    rows = [
        (
            "episodes/s (make + reset + answer step)",
            f"{ours:,.0f}",
            f"{peer:,.0f}" if peer else "n/a",
        ),
        ("µs per episode", f"{1e6 / ours:.1f}", f"{1e6 / peer:.1f}" if peer else "n/a"),
        ("ratio ours / skyrl-gym (target >= 1.0)", f"{ratio:.2f}" if ratio else "n/a", ""),
    ]
    notes = [
        f"median of {ROUNDS} alternating rounds of {ROUND_SECONDS:g} s; baseline: PyPI skyrl-gym gsm8k "
        "in its own virtualenv (.venvs/skyrl-gym)",
        f"ours rounds: {', '.join(f'{r:,.0f}' for r in ours_rounds)}",
        f"peer rounds: {', '.join(f'{r:,.0f}' for r in peer_rounds) or peer_error}",
    ]
    return BenchReport(
        name="env",
        rows=rows,
        result={
            "ours_steps_per_s": round(ours, 1),
            "skyrl_gym_steps_per_s": round(peer, 1) if peer else None,
            "ratio": round(ratio, 3) if ratio else None,
        },
        notes=notes,
    )
