"""`skyrl train CONFIG [key=value ...] [--resume] [--ray]`."""

from __future__ import annotations

import typer


def train_command(
    config: str = typer.Argument(..., help="YAML config file ('-' for the defaults)."),
    overrides: list[str] = typer.Argument(
        None, help="key.path=value overrides, e.g. trainer.steps=20."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from the run's latest checkpoint."
    ),
    ray: bool = typer.Option(
        False, "--ray", help="Learner and engine as Ray actors on a local Ray cluster."
    ),
) -> None:
    """Train a policy with the async trainer (GRPO/PPO, bounded staleness, checkpoints)."""
    from rich.console import Console

    from trainer.config import ConfigError, load_config

    console = Console()
    try:
        cfg = load_config(None if config == "-" else config, overrides or [])
    except ConfigError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    if ray:
        from trainer.ray_mode import run_ray

        result = run_ray(cfg, resume=resume)
    else:
        from trainer.async_trainer import AsyncTrainer

        result = AsyncTrainer(cfg, resume=resume, console=console).run()
    console.print(
        f"trained {result.steps} steps (policy version {result.version}); run in {result.run_dir}"
    )
