"""`skyrl demo`: RL-train a small model on CPU and write a report.

Only typer is imported at module level; the trainer loads when the command runs.
"""

from __future__ import annotations

from pathlib import Path

import typer

TASKS = ("lookup", "terminal")
"""`--task` values: the lookup demo (`trainer.demos.lookup`) and the terminal demo
(`trainer.demos.terminal`)."""


def demo_command(
    task: str = typer.Option(
        "lookup",
        help="'lookup' (look a price up with a tool; `--model` picks the set-up) or "
        "'terminal' (SmolLM2 + LoRA on generated shell tasks: oracle demonstrations, SFT, "
        "then RL, judged per family on held-out tasks; ~30 min on 2 cores).",
    ),
    model: str = typer.Option(
        "smollm2",
        help="--task lookup: 'smollm2' (SmolLM2-135M-Instruct + LoRA on `lookup-chat`, "
        "~5 min) or 'tiny' (a 100k-parameter model on `lookup`, ~1 min).",
    ),
    steps: int | None = typer.Option(
        None, help="Optimizer steps (default: the task's; --task terminal: the RL steps)."
    ),
    seed: int = typer.Option(0, help="Seeds data order, sampling and initialisation."),
    out: Path | None = typer.Option(
        None, "--out", help="Report directory (default: runs/demo, or runs/demo-terminal)."
    ),
    rl_only: bool = typer.Option(
        False,
        "--rl-only",
        help="--task terminal: GRPO on echo-word only (no demonstrations, no SFT).",
    ),
    sft_steps: int | None = typer.Option(None, help="--task terminal: SFT steps."),
    demos_per_family: int | None = typer.Option(
        None, help="--task terminal: train-split demonstrations per family."
    ),
    heldout_per_family: int | None = typer.Option(
        None, help="--task terminal: held-out episodes per family in each evaluation."
    ),
    families: str | None = typer.Option(
        None, help="--task terminal: comma-separated families (default: eight, easy to hard)."
    ),
) -> None:
    """RL-train a small model on CPU and write OUT/report.md (curves, metrics, held-out
    success, trajectory viewer) and OUT/results.json."""
    if task not in TASKS:
        raise typer.BadParameter(f"choose from {', '.join(TASKS)}", param_hint="--task")
    if task == "terminal":
        from skyrl_sdk.trainer.demos.terminal import DEFAULT_OUT, run_terminal_demo

        if rl_only:
            run_terminal_demo(steps=steps, out_dir=out or DEFAULT_OUT, seed=seed)
            return
        from skyrl_sdk.trainer.demos.terminal_pipeline import (
            pipeline_settings,
            run_terminal_pipeline,
        )

        settings = pipeline_settings(
            rl_steps=steps,
            sft_steps=sft_steps,
            demos_per_family=demos_per_family,
            heldout_per_family=heldout_per_family,
            families=families,
        )
        run_terminal_pipeline(out or DEFAULT_OUT, seed=seed, settings=settings)
        return
    from skyrl_sdk.trainer.demos.lookup import PRESETS, run_demo

    if model not in PRESETS:
        raise typer.BadParameter(f"choose from {', '.join(PRESETS)}", param_hint="--model")
    run_demo(steps=steps, model=model, seed=seed, out_dir=out or "runs/demo")
