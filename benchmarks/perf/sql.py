"""`skyrl bench sql`: env steps/s of our `sql` env against PyPI `skyrl-gym`'s `text2sql` env.

Both envs play the same episodes on the same SQLite file (the bundled `retail` database, in
the Spider layout both understand): a fresh env per episode (as both agent loops do), then the
same six actions: five `<sql>` explorations (a lookup, a join with grouping, a 750-row scan that
hits the 9000-character truncation, an error, a nested query) and a `<solution>` that matches
gold (reward 1 in both). skyrl-gym runs in its own virtualenv (`.venvs/skyrl-gym`), in the same
run. Last line: `{"ours_steps_per_s", "skyrl_gym_steps_per_s", "speedup", ...}`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.benchmarks.perf.report import BenchReport

DB_ID = "retail"
GOLD = (
    "SELECT c.name, COUNT(*) FROM categories AS c JOIN products AS p "
    "ON p.category_id = c.category_id GROUP BY c.name"
)
ACTIONS: tuple[str, ...] = (
    "<think>Look at a few customers first.</think>\n<sql>SELECT * FROM customers LIMIT 5</sql>",
    "<think>Products per category.</think>\n<sql>SELECT c.name, COUNT(*) FROM categories AS c "
    "JOIN products AS p ON p.category_id = c.category_id GROUP BY c.name</sql>",
    "<think>All order lines.</think>\n<sql>SELECT * FROM order_items</sql>",
    "<think>Try the reviews table.</think>\n<sql>SELECT stars FROM reviews</sql>",
    "<think>Nested check.</think>\n<sql>SELECT name FROM products WHERE price = "
    "(SELECT MAX(price) FROM products)</sql>",
    f"<think>The grouping query answers it.</think>\n<solution>{GOLD}</solution>",
)

PEER_PACKAGE = "skyrl-gym"
PEER_SCRIPT = r"""
import json, os, sys, time
# `python -c` puts the working directory first on sys.path: drop it, or our own `skyrl_gym`
# package (in the repository root) would shadow the peer's.
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
import skyrl_gym
from omegaconf import DictConfig
root, db_id, gold, actions, seconds = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), float(sys.argv[5])
extras = {"db_id": db_id, "reward_spec": {"method": "rule", "ground_truth": gold}, "data": "spider",
          "max_turns": len(actions)}
prompt = [{"role": "user", "content": "question"}]

def episode():
    env = skyrl_gym.make("text2sql", env_config=DictConfig({"db_path": root}), extras=extras)
    env.init(prompt)
    rewards = [env.step(a)["reward"] for a in actions]
    env.close()
    return rewards

rewards = episode()  # warm-up, and the reward check
steps, started = 0, time.perf_counter()
while True:
    episode()
    steps += len(actions)
    elapsed = time.perf_counter() - started
    if elapsed >= seconds:
        break
print(json.dumps({"steps": steps, "seconds": elapsed, "final_reward": rewards[-1]}))
"""


@dataclass(frozen=True)
class Measurement:
    """Steps/s of one env over whole episodes."""

    steps: int
    """Env steps taken (episodes x actions)."""
    seconds: float
    """Wall time of those steps, env construction and reset included."""
    final_reward: float
    """Reward of the solution step (1.0 when both agree the solution is correct)."""

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


def prepare_databases(root: Path) -> Path:
    """Copy the bundled `retail` database into `<root>/spider/database/retail/retail.sqlite`."""
    from skyrl_gym.envs.sql.bundled import bundled_root

    source = bundled_root() / "database" / DB_ID / f"{DB_ID}.sqlite"
    target = root / "spider" / "database" / DB_ID / f"{DB_ID}.sqlite"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return root


def measure_ours(root: Path, seconds: float = 2.0) -> Measurement:
    """Our env through `skyrl_gym.make` (all wrappers), a fresh env per episode."""
    import skyrl_gym

    row = {"task_id": "bench", "question": "How many products per category?", "db_id": DB_ID,
           "gold_sql": GOLD, "data": "spider"}  # fmt: skip
    db_root = str(root)

    def episode() -> list[float]:
        env = skyrl_gym.make("sql", tasks=[row], db_root=db_root, max_turns=len(ACTIONS))
        env.reset(options={"task": row})
        rewards = [env.step(a)[1] for a in ACTIONS]
        env.close()
        return rewards

    rewards = episode()
    steps, started = 0, time.perf_counter()
    while True:
        episode()
        steps += len(ACTIONS)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
    return Measurement(steps, elapsed, rewards[-1])


def measure_peer(root: Path, seconds: float = 2.0) -> Measurement:
    """PyPI skyrl-gym's `text2sql` env in its own virtualenv."""
    from skyrl_sdk.benchmarks.perf.peer_venv import run_in_peer

    result = run_in_peer(
        PEER_PACKAGE, PEER_SCRIPT, str(root), DB_ID, GOLD, json.dumps(ACTIONS), str(seconds)
    )
    return Measurement(
        int(result["steps"]), float(result["seconds"]), float(result["final_reward"])
    )


def run(seconds: float = 2.0, *, include_peer: bool = True) -> BenchReport:
    """Measure both envs on the same episodes; return the report."""
    from skyrl_sdk.benchmarks.perf.peer_venv import PeerUnavailable

    notes = [
        f"{len(ACTIONS)} actions per episode (5 <sql> + 1 <solution>), fresh env per episode, "
        f"~{seconds:g} s per side; same SQLite file and gold query",
    ]
    with tempfile.TemporaryDirectory(prefix="skyrl-sql-bench-") as tmp:
        root = prepare_databases(Path(tmp))
        ours = measure_ours(root, seconds)
        peer: Measurement | None = None
        if include_peer:
            try:
                peer = measure_peer(root, seconds)
            except (PeerUnavailable, OSError) as e:
                notes.append(f"skyrl-gym baseline unavailable: {str(e).splitlines()[0]}")
    speedup = ours.steps_per_s / peer.steps_per_s if peer and peer.steps_per_s else None
    rows = [
        ("env steps/s", f"{ours.steps_per_s:,.0f}", f"{peer.steps_per_s:,.0f}" if peer else "-"),
        (
            "µs per step",
            f"{1e6 / ours.steps_per_s:,.1f}" if ours.steps_per_s else "-",
            f"{1e6 / peer.steps_per_s:,.1f}" if peer and peer.steps_per_s else "-",
        ),
        ("solution reward", f"{ours.final_reward:g}", f"{peer.final_reward:g}" if peer else "-"),
        ("speedup (ours / skyrl-gym)", f"{speedup:.2f}x" if speedup else "-", ""),
    ]
    result: dict[str, Any] = {
        "ours_steps_per_s": round(ours.steps_per_s, 1),
        "skyrl_gym_steps_per_s": round(peer.steps_per_s, 1) if peer else None,
        "speedup": round(speedup, 2) if speedup else None,
        "ours_final_reward": ours.final_reward,
        "skyrl_gym_final_reward": peer.final_reward if peer else None,
    }
    return BenchReport("sql", rows, result, notes)
