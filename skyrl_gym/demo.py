"""`skyrl demo` / `make demo`: evaluate built-in scripted policies on the `math` env.

Two policies play every episode: an oracle that computes with the calculator tool and answers,
and a careless one that answers without computing. The summary shows the env telling them
apart; results go to `runs/demo/results.json`. (The RL training demo replaces this once the
trainer lands.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import skyrl_gym

ScriptedPolicy = Callable[[dict[str, Any], int, list[dict[str, Any]]], str]


def oracle(task: dict[str, Any], turn: int, observation: list[dict[str, Any]]) -> str:
    """Calculator first, then answer with the calculator's result."""
    if turn == 0:
        return f"I will compute it. <calculator>{task['expression']}</calculator>"
    result = (
        observation[-1]["content"]
        .replace("<observation>", "")
        .replace("</observation>", "")
        .strip()
    )
    return f"<answer>{result}</answer>"


def careless(task: dict[str, Any], turn: int, observation: list[dict[str, Any]]) -> str:
    """Answers the first number in the question, malformed half of the time."""
    first = next((w for w in task["question"].split() if w.isdigit()), "0")
    return f"<answer>{first}" if int(first) % 2 else f"<answer>{first}</answer>"


def play(env_id: str, policy: ScriptedPolicy, seed: int) -> dict[str, Any]:
    env = skyrl_gym.make(env_id)
    try:
        observation, info = env.reset(seed=seed)
        task = env.unwrapped.task
        turn, terminated, truncated = 0, False, False
        while not (terminated or truncated):
            observation, _, terminated, truncated, info = env.step(policy(task, turn, observation))
            turn += 1
        return {"task_id": task["task_id"], **info["episode"]}
    finally:
        env.close()


def run_demo(episodes: int = 16, out_dir: str | Path = "runs/demo") -> dict[str, Any]:
    console = Console()
    policies: dict[str, ScriptedPolicy] = {"oracle": oracle, "careless": careless}
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    with Progress(console=console) as progress:
        for name, policy in policies.items():
            bar = progress.add_task(f"math / {name}", total=episodes)
            results[name] = []
            for seed in range(episodes):
                results[name].append(play("math", policy, seed))
                progress.advance(bar)
    table = Table(title=f"math env, {episodes} episodes per policy")
    for column in ("policy", "mean reward", "success", "mean turns", "parse errors"):
        table.add_column(column, justify="right" if column != "policy" else "left")
    summary = {}
    for name, rows in results.items():
        n = len(rows)
        summary[name] = {
            "mean_reward": sum(r["return"] for r in rows) / n,
            "success_rate": sum(r.get("correct", False) for r in rows) / n,
            "mean_turns": sum(r["turns"] for r in rows) / n,
            "parse_errors": sum(r["parse_errors"] for r in rows),
        }
        s = summary[name]
        table.add_row(
            name,
            f"{s['mean_reward']:.2f}",
            f"{s['success_rate']:.0%}",
            f"{s['mean_turns']:.1f}",
            str(s["parse_errors"]),
        )
    console.print(table)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "env": "math",
        "episodes": episodes,
        "summary": summary,
        "episodes_detail": results,
        "duration_s": time.perf_counter() - started,
    }
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    console.print(f"results written to {out / 'results.json'}")
    return payload
