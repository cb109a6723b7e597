"""`skyrl bench env`: make + reset + one answer step, ours against PyPI `skyrl-gym`'s gsm8k.

Both sides do the same work per episode: build the env from the registry, start it on a task,
and score one final answer (correct, so the full reward path runs). Ours is `math-answer`
(through `make`, so with its `EpisodeGuard`: order enforcement, turn limit, episode stats);
the peer is `skyrl_gym.make("gsm8k")` + `init` + `step`, run in its own virtualenv. Rounds
alternate between the two to spread machine noise, and each side's best round counts (as
`timeit` advises: slower rounds measure interference, not the code). Rates are per second of
the process's own CPU time, so other jobs on the machine skew the ratio less (wall-clock
rates are printed too). Each side warms up with 2000 episodes and times only its own loop:
the peer's interpreter start and imports fall outside it. The peer reports its Python
version, and a note says so when it is not ours (the ratio would compare interpreters).
"""

from __future__ import annotations

import platform
import time

from skyrl_sdk.benchmarks.perf.peer_venv import PeerUnavailable, run_in_peer
from skyrl_sdk.benchmarks.perf.report import BenchReport

ROUNDS = 8
ROUND_SECONDS = 0.5

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
n, start, cpu = 0, time.perf_counter(), time.process_time()
while time.perf_counter() - start < seconds:
    for _ in range(500):
        once()
    n += 500
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"cpu_steps_per_s": n / cpu, "wall_steps_per_s": n / wall,
                  "python": sys.version.split()[0]}))
"""


def _ours(seconds: float) -> tuple[float, float]:
    """(episodes per CPU second, episodes per wall second)."""
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
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for _ in range(500):
            once()
        n += 500
    return n / (time.process_time() - cpu), n / (time.perf_counter() - start)


def interpreter_note(peer_python: str | None) -> str | None:
    """A note when the peer's interpreter is not ours: the ratio then compares Pythons too
    (the peer venv is built from whichever interpreter first ran the bench)."""
    ours = platform.python_version()
    if peer_python is None or peer_python == ours:
        return None
    return f"warning: the peer runs Python {peer_python}, ours {ours}: rebuild .venvs/skyrl-gym"


def run() -> BenchReport:
    ours_rounds: list[tuple[float, float]] = []
    peer_rounds: list[tuple[float, float]] = []
    peer_error = None
    peer_version: str | None = None
    for _ in range(ROUNDS):
        ours_rounds.append(_ours(ROUND_SECONDS))
        if peer_error is None:
            try:
                got = run_in_peer("skyrl-gym", PEER_SCRIPT, str(ROUND_SECONDS))
                peer_rounds.append((got["cpu_steps_per_s"], got["wall_steps_per_s"]))
                peer_version = got.get("python")
            except PeerUnavailable as e:
                peer_error = str(e).splitlines()[0]
    ours = max(r[0] for r in ours_rounds)
    ours_wall = max(r[1] for r in ours_rounds)
    peer = max(r[0] for r in peer_rounds) if peer_rounds else None
    peer_wall = max(r[1] for r in peer_rounds) if peer_rounds else None
    ratio = ours / peer if peer else None

    def fmt(x: float | None) -> str:
        return f"{x:,.0f}" if x else "n/a"

    rows = [
        ("episodes / CPU second (make + reset + answer)", fmt(ours), fmt(peer)),
        ("episodes / wall second", fmt(ours_wall), fmt(peer_wall)),
        ("µs of CPU per episode", f"{1e6 / ours:.1f}", f"{1e6 / peer:.1f}" if peer else "n/a"),
        ("ratio ours / skyrl-gym (target >= 1.0)", f"{ratio:.2f}" if ratio else "n/a", ""),
    ]
    notes = [
        f"best of {ROUNDS} alternating rounds of {ROUND_SECONDS:g} s; baseline: PyPI skyrl-gym "
        "gsm8k in its own virtualenv (.venvs/skyrl-gym)",
        f"ours per CPU s: {', '.join(fmt(r[0]) for r in ours_rounds)}",
        f"peer per CPU s: {', '.join(fmt(r[0]) for r in peer_rounds) or peer_error}",
    ]
    if (note := interpreter_note(peer_version)) is not None:
        notes.append(note)
    return BenchReport(
        name="env",
        rows=rows,
        result={
            "ours_steps_per_s": round(ours, 1),
            "skyrl_gym_steps_per_s": round(peer, 1) if peer else None,
            "ratio": round(ratio, 3) if ratio else None,
            "ours_wall_steps_per_s": round(ours_wall, 1),
            "skyrl_gym_wall_steps_per_s": round(peer_wall, 1) if peer_wall else None,
        },
        notes=notes,
    )
