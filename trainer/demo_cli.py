"""`skyrl demo`: RL-train a small model on CPU and write a report.

Only typer is imported at module level; the trainer loads when the command runs.
"""

from __future__ import annotations

import typer


def demo_command(
    model: str = typer.Option(
        "smollm2",
        help="'smollm2' (SmolLM2-135M-Instruct + LoRA on `lookup-chat`, ~5 min) or "
        "'tiny' (a 100k-parameter model on `lookup`, ~1 min).",
    ),
    steps: int | None = typer.Option(None, help="Optimizer steps (default: the model's)."),
    seed: int = typer.Option(0, help="Seeds data order, sampling and initialisation."),
    task: str | None = typer.Option(
        None,
        help="'lookup' (the default set-up) or 'terminal' (SmolLM2 + LoRA on generated shell "
        "tasks, held-out success every 5 steps); overrides --model.",
    ),
    out: str = typer.Option("runs/demo", "--out", help="Report folder."),
) -> None:
    """RL-train a small model on CPU and write OUT/report.md (reward curve, held-out success,
    metrics, trajectory viewer)."""
    from skyrl_sdk.trainer.demo import PRESETS, TASK_PRESETS, run_demo

    if task is not None:
        if task not in TASK_PRESETS:
            raise typer.BadParameter(f"choose from {', '.join(TASK_PRESETS)}", param_hint="--task")
        model = TASK_PRESETS[task]
    if model not in PRESETS:
        raise typer.BadParameter(f"choose from {', '.join(PRESETS)}", param_hint="--model")
    run_demo(steps=steps, model=model, seed=seed, out_dir=out)
