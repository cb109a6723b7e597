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
        False,
        "--ray",
        help="Learner ranks, engines and env workers as Ray actors on a local Ray cluster.",
    ),
) -> None:
    """Train a policy with the async trainer (GRPO/PPO, bounded staleness, checkpoints);
    `backend=tinker` runs the same loop through a Tinker API endpoint."""
    from rich.console import Console

    from skyrl_sdk.trainer.config import (
        Backend,
        ConfigError,
        DistributedStrategy,
        EngineKind,
        load_config,
    )

    console = Console()
    try:
        cfg = load_config(None if config == "-" else config, overrides or [])
    except ConfigError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None
    if cfg.distributed.strategy is not DistributedStrategy.NONE and not ray:
        console.print(
            f"[red]distributed.strategy={cfg.distributed.strategy.value} needs --ray "
            "(the learner ranks are Ray actors)[/red]"
        )
        raise typer.Exit(2)
    if ray and cfg.rollout.engine is not EngineKind.LOCAL:
        console.print(
            f"[red]rollout.engine={cfg.rollout.engine.value} is not available with --ray "
            "(Ray mode's engine actors run the local engine)[/red]"
        )
        raise typer.Exit(2)
    if cfg.backend is Backend.TINKER:
        from skyrl_sdk.trainer.tinker_trainer import TinkerTrainer

        if ray:
            console.print("[red]--ray runs the local backend; backend 'tinker' has no actors[/red]")
            raise typer.Exit(2)
        try:
            tinker_trainer = TinkerTrainer(cfg, resume=resume, console=console)
        except (ConfigError, ImportError) as e:  # a setting it cannot honour; no tinker SDK
            console.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from None
        result = tinker_trainer.run()
    elif ray:
        from skyrl_sdk.trainer.ray_mode import run_ray

        result = run_ray(cfg, resume=resume)
    else:
        from skyrl_sdk.trainer.async_trainer import AsyncTrainer

        result = AsyncTrainer(cfg, resume=resume, console=console).run()
    console.print(
        f"trained {result.steps} steps (policy version {result.version}); run in {result.run_dir}"
    )
