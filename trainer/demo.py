"""`skyrl demo` / `make demo`: RL-train a small model on CPU and show the reward climbing.

The model is a tiny Qwen2 (about 100k parameters) built here, warmed up for a few seconds on
an echo corpus (it learns to read a number back from its context, nothing about the task),
then trained with the async trainer (GRPO, in-flight weight updates) on the `lookup` env: call
the lookup tool, read the value, answer it. The report goes to `runs/demo/`: a reward curve
picture, a metrics table, and the trajectories for `skyrl view`.

SmolLM2-135M is supported by the trainer (`model.source: smollm2`, with LoRA) but is too slow
on 2 CPU cores for a visible climb in a few minutes, so the demo uses the tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def run_demo(
    steps: int = 100, out_dir: str | Path = "runs/demo", staleness: int = 0
) -> dict[str, Any]:
    """Train for `steps` optimizer steps and write the report; returns the summary."""
    from trainer.async_trainer import AsyncTrainer
    from trainer.config import build_config

    console = Console()
    out = Path(out_dir)
    cfg = build_config(
        {},
        [
            f"out_dir={out}",
            f"trainer.steps={steps}",
            f"trainer.max_staleness={staleness}",
            "optim.lr=3e-3",
        ],
    )
    console.print(
        f"[bold]skyrl demo[/bold]: GRPO on the `lookup` env, tiny Qwen2, {steps} steps, "
        f"max_staleness={staleness}, CPU"
    )
    result = AsyncTrainer(cfg, console=console).run()
    rows = list(result.history)
    rewards = [r["reward/mean"] for r in rows]
    window = max(1, min(10, len(rows) // 4 or 1))
    summary = {
        "steps": result.steps,
        "reward_start": sum(rewards[:window]) / window,
        "reward_end": sum(rewards[-window:]) / window,
        "success_end": sum(r["success/rate"] for r in rows[-window:]) / window,
        "wall_s": sum(r["time/step_s"] for r in rows),
        "rewards": rewards,
    }
    table = Table(title="learning curve (every ~10th step)")
    for column in ("step", "reward", "success", "entropy", "staleness max", "tok/s"):
        table.add_column(column, justify="right")
    stride = max(1, len(rows) // 10)
    for r in rows[::stride] + ([rows[-1]] if (len(rows) - 1) % stride else []):
        table.add_row(
            str(r["step"]),
            f"{r['reward/mean']:.3f}",
            f"{r['success/rate']:.0%}",
            f"{r['policy/entropy']:.2f}",
            str(r["staleness/max"]),
            f"{r['throughput/tokens_per_s']:.0f}",
        )
    console.print(table)
    picture = write_curve(rewards, out)
    report = out / "report.md"
    report.write_text(_report(summary, rows, picture, table_rows=rows[::stride]))
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    console.print(
        f"reward {summary['reward_start']:.2f} -> {summary['reward_end']:.2f} "
        f"(first/last {window} steps). Report: {report}; picture: {picture}; "
        f"trajectories: skyrl view {out / 'trajectories.jsonl'}"
    )
    return summary


def write_curve(rewards: list[float], out: Path) -> Path:
    """The reward curve as PNG (matplotlib, when installed) or a hand-written SVG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = out / "reward_curve.svg"
        path.write_text(_svg(rewards))
        return path
    path = out / "reward_curve.png"
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(rewards) + 1), rewards)
    ax.set(xlabel="step", ylabel="mean reward", ylim=(0, 1), title="lookup env, GRPO")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _svg(values: list[float], width: int = 600, height: int = 300, pad: int = 40) -> str:
    n = max(len(values) - 1, 1)
    points = " ".join(
        f"{pad + i * (width - 2 * pad) / n:.1f},{height - pad - max(0.0, min(1.0, v)) * (height - 2 * pad):.1f}"
        for i, v in enumerate(values)
    )
    grid = "".join(
        f'<line x1="{pad}" x2="{width - pad}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
        f'<text x="{pad - 8}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{label}</text>'
        for label, y in (
            (f"{t:.1f}", height - pad - t * (height - 2 * pad)) for t in (0, 0.25, 0.5, 0.75, 1.0)
        )
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">'
        f'<rect width="100%" height="100%" fill="white"/>{grid}'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{points}"/>'
        f'<text x="{width / 2}" y="{height - 8}" font-size="12" text-anchor="middle">step (1..{len(values)})</text>'
        f'<text x="{width / 2}" y="20" font-size="13" text-anchor="middle">mean reward per step, lookup env</text>'
        "</svg>"
    )


def _report(
    summary: dict[str, Any],
    rows: list[dict[str, Any]],
    picture: Path,
    table_rows: list[dict[str, Any]],
) -> str:
    lines = [
        "# skyrl demo: GRPO on the lookup env",
        "",
        f"![reward curve]({picture.name})",
        "",
        f"Reward {summary['reward_start']:.3f} -> {summary['reward_end']:.3f} in {summary['steps']} steps "
        f"({summary['wall_s']:.0f} s of training). Final success rate {summary['success_end']:.0%}.",
        "",
        "| step | reward | success | loss | entropy | kl(sampler) | staleness max | gen s | train s | sync s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table_rows:
        lines.append(
            f"| {r['step']} | {r['reward/mean']:.3f} | {r['success/rate']:.0%} | {r['loss/total']:+.4f} | "
            f"{r['policy/entropy']:.3f} | {r['policy/kl_sampler']:.4f} | {r['staleness/max']} | "
            f"{r['time/gen_s']:.2f} | {r['time/train_s']:.2f} | {r['time/sync_s']:.3f} |"
        )
    lines += [
        "",
        "All metrics per step: `metrics.jsonl`. Trajectories: `skyrl view trajectories.jsonl`.",
        "",
    ]
    return "\n".join(lines)
