"""`skyrl demo`: RL-train a small model on CPU and write a report.

Only typer is imported at module level; the trainer loads when the command runs.
"""

from __future__ import annotations

from pathlib import Path

import typer

TASKS = ("lookup", "terminal", "distill")
"""`--task` values: the lookup demo (`trainer.demos.lookup`), the terminal demo
(`trainer.demos.terminal`) and distillation of a terminal run (`trainer.demos.distill`)."""


def demo_command(
    task: str = typer.Option(
        "lookup",
        help="'lookup' (look a price up with a tool; `--model` picks the set-up) or "
        "'terminal' (SmolLM2 + LoRA on generated shell tasks: oracle demonstrations, SFT, "
        "then RL, judged per family on held-out tasks; ~30 min on 2 cores) or 'distill' "
        "(on-policy distillation of a finished terminal run, `--teacher`, into a fresh "
        "SmolLM2 + LoRA, against GRPO for as many sampled tokens).",
    ),
    model: str = typer.Option(
        "smollm2",
        help="--task lookup: 'smollm2' (SmolLM2-135M-Instruct + LoRA on `lookup-chat`, "
        "~5 min) or 'tiny' (a 100k-parameter model on `lookup`, ~1 min).",
    ),
    steps: int | None = typer.Option(
        None, help="Optimizer steps (default: the task's; --task terminal: the RL steps)."
    ),
    seed: int | None = typer.Option(
        None,
        help="Seeds data order, sampling and initialisation (default 0; --task distill: the "
        "teacher run's, so the held-out episodes are sampled as in its evaluations).",
    ),
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
    teacher: Path | None = typer.Option(
        None,
        "--teacher",
        help="--task distill: a finished `--task terminal` output (or its rl/ run directory).",
    ),
) -> None:
    """RL-train a small model on CPU and write OUT/report.md (curves, metrics, held-out
    success, trajectory viewer) and OUT/results.json."""
    if task not in TASKS:
        raise typer.BadParameter(f"choose from {', '.join(TASKS)}", param_hint="--task")
    if task == "distill":
        _distill(teacher, steps, seed, out)
        return
    seed = 0 if seed is None else seed
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


def _distill(teacher: Path | None, steps: int | None, seed: int | None, out: Path | None) -> None:
    """`--task distill`: the teacher checked first, each problem one line (exit 2)."""
    if teacher is None:
        raise typer.BadParameter(
            "--task distill needs --teacher DIR (a finished `skyrl demo --task terminal` output)",
            param_hint="--teacher",
        )
    from skyrl_sdk.trainer.demos.distill import (
        DEFAULT_OUT,
        DistillSettings,
        OutputInUseError,
        TeacherRunError,
        check_out,
        find_teacher,
        run_distill_demo,
    )

    try:
        check_out(out or DEFAULT_OUT)
    except OutputInUseError as e:
        raise typer.BadParameter(str(e), param_hint="--out") from None
    try:
        find_teacher(teacher)
    except TeacherRunError as e:
        raise typer.BadParameter(str(e), param_hint="--teacher") from None
    settings = DistillSettings() if steps is None else DistillSettings(steps=steps)
    run_distill_demo(teacher, out or DEFAULT_OUT, seed=seed, settings=settings)
