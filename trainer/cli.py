"""`skyrl train [CONFIG] [key=value ...] [--resume] [--ray] [--print-config] [--import MODULE]`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from skyrl_sdk.trainer.config import TrainConfig
    from skyrl_sdk.trainer.loop import TrainingLoop


def _split_config(config: str | None, overrides: list[str]) -> tuple[str | None, list[str]]:
    """The config file (None: defaults) and the overrides. With CONFIG optional, an override
    given first lands in `config`; it is one when it has an `=` and names no file."""
    if config is not None and "=" in config and not Path(config).exists():
        return None, [config, *overrides]
    return (None if config in (None, "-") else config), overrides


def train_command(
    config: str | None = typer.Argument(
        None,
        help="YAML config file ('-' for the defaults; see --print-config for every key).",
        show_default=False,
    ),
    overrides: list[str] = typer.Argument(
        None, help="key.path=value overrides, e.g. trainer.steps=20."
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue from the run's latest checkpoint (refused if the config changed).",
    ),
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Learner ranks, engines and env workers as Ray actors on a local Ray cluster.",
    ),
    print_config: bool = typer.Option(
        False,
        "--print-config",
        help="Print the full config (defaults merged with CONFIG and overrides) as YAML; exit.",
    ),
    imports: list[str] = typer.Option(
        [],
        "--import",
        metavar="MODULE",
        help="Import MODULE first (repeatable), so its `skyrl_gym.register()` calls run.",
    ),
) -> None:
    """Train a policy with the async trainer (GRPO/PPO, bounded staleness, checkpoints);
    `backend=tinker` runs the same loop through a Tinker API endpoint. `env.id` (required)
    is a registered id or an entry point 'module:Class'; `env.tasks=PATH` gives it JSONL or
    parquet task rows; an env without tasks is played by seeds."""
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    try:
        cfg = _load_config(config, overrides or [], print_config=print_config)
        if print_config:
            typer.echo(cfg.to_yaml(), nl=False)
            return
        _check_env(cfg, imports, console)
        _check_mode(cfg, ray=ray)
        trainer = _build_or_refuse(cfg, resume=resume, ray=ray, console=console)
    except _Refused as e:
        console.print(f"[red]error: {escape(str(e))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    from skyrl_sdk.trainer.opd import TeacherError

    try:
        result = trainer.run()
    except TeacherError as e:  # loaded when the run starts: another tokenizer than the student's
        console.print(f"[red]error: {escape(str(e))}[/red]", soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(
        f"trained {result.steps} steps (policy version {result.version}); run in {result.run_dir}"
    )


class _Refused(Exception):
    """What `skyrl train` refuses to run, said in one line (exit status 2)."""


def _load_config(config: str | None, overrides: list[str], *, print_config: bool) -> TrainConfig:
    """The config file (or the defaults) with `overrides`, validated."""
    from skyrl_sdk.trainer.config import ConfigError, load_config

    path, overrides = _split_config(config, overrides)
    if config is None and not overrides and not print_config:
        raise _Refused(
            "missing CONFIG: a YAML file, or '-' for the defaults (--print-config shows them)"
        )
    try:
        return load_config(path, overrides)
    except ConfigError as e:
        raise _Refused(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:  # unreadable: a directory, no permission, binary
        raise _Refused(f"cannot read config file {path}: {e}") from None


def _check_env(cfg: TrainConfig, imports: list[str], console: Console) -> None:
    """`env.id` names an env (after `--import`s); warn when `env.max_turns` raises its
    registered turn limit."""
    from rich.markup import escape

    from skyrl_gym.registry import EntryPointError, UnknownEnvError, resolve
    from skyrl_sdk.trainer.config import ConfigError
    from skyrl_sdk.trainer.run_env import require_env_id

    try:
        env_id = require_env_id(cfg)  # no default: say so before anything loads
    except ConfigError as e:
        raise _Refused(str(e)) from None
    try:
        spec = resolve(env_id, imports=imports, from_cwd=True)
    except (UnknownEnvError, EntryPointError) as e:
        raise _Refused(f"env.id: {e}") from None
    if spec.max_turns is not None and cfg.env.max_turns > spec.max_turns:
        # `make` raises the env's registered limit to env.max_turns; say so, since the env's
        # author chose that limit (and may word prompts around it).
        console.print(
            f"[yellow]warning: env.max_turns={cfg.env.max_turns} is above the turn limit of "
            f"env {escape(repr(cfg.env.id))} ({spec.max_turns}); raising it to "
            f"{cfg.env.max_turns}[/yellow]"
        )


def _check_mode(cfg: TrainConfig, *, ray: bool) -> None:
    """The settings that `--ray` (or its absence) and the backend cannot run together; the
    command agent's venv, binds and env, before any model loads."""
    from skyrl_sdk.trainer.config import Backend, DistributedStrategy, EngineKind

    if cfg.distributed.strategy is not DistributedStrategy.NONE and not ray:
        raise _Refused(
            f"distributed.strategy={cfg.distributed.strategy.value} needs --ray "
            "(the learner ranks are Ray actors)"
        )
    if cfg.agent.spec.strip() != "loop":
        if ray:
            raise _Refused("agent.spec 'command:CMD' runs in one process: drop --ray")
        _check_command_agent(cfg)
    if ray and cfg.rollout.engine is not EngineKind.LOCAL:
        raise _Refused(
            f"rollout.engine={cfg.rollout.engine.value} is not available with --ray "
            "(Ray mode's engine actors run the local engine)"
        )
    if cfg.backend is Backend.TINKER and ray:
        raise _Refused("--ray runs the local backend; backend 'tinker' has no actors")
    if cfg.algorithm.teacher:  # a teacher that names nothing, before any model loads
        from skyrl_sdk.trainer.opd import TeacherError, resolve_teacher

        try:
            resolve_teacher(cfg.algorithm.teacher, cfg)
        except TeacherError as e:
            raise _Refused(str(e)) from None


def _check_command_agent(cfg: TrainConfig) -> None:
    """The command agent's venv, binds and env, checked before any model loads."""
    import skyrl_gym
    from skyrl_sdk.agents.command_agent import CommandAgentError, host_env, parse_agent
    from skyrl_sdk.trainer.config import ConfigError
    from skyrl_sdk.trainer.run_env import require_env_id, resolve_env_kwargs

    probe = None
    try:
        parse_agent(cfg.agent.spec, venv=cfg.agent.venv, binds=cfg.agent.binds)
        kwargs = resolve_env_kwargs(cfg)
        probe = skyrl_gym.make(require_env_id(cfg), max_turns=cfg.env.max_turns, **kwargs)
        host_env(probe)
    except CommandAgentError as e:
        raise _Refused(f"agent: {e}") from None
    except ConfigError as e:
        raise _Refused(str(e)) from None
    finally:
        if probe is not None:
            probe.close()


def _build_or_refuse(
    cfg: TrainConfig, *, resume: bool, ray: bool, console: Console
) -> TrainingLoop:
    """`_build_trainer`, with what the backend refuses said in one line."""
    from skyrl_sdk.trainer.checkpoint import ResumeConfigError
    from skyrl_sdk.trainer.config import ConfigError

    try:
        return _build_trainer(cfg, resume=resume, ray=ray, console=console)
    except (ResumeConfigError, ConfigError, ImportError) as e:
        # A changed config under --resume, a setting the backend cannot honour, or a missing
        # extra (the message names it): one line, for every backend alike.
        raise _Refused(str(e)) from None


def _build_trainer(cfg: TrainConfig, *, resume: bool, ray: bool, console: Console) -> TrainingLoop:
    """The training loop with the backend `cfg` and `--ray` choose (the Ray and Tinker
    modules are imported only when chosen)."""
    from skyrl_sdk.trainer.config import Backend

    if cfg.backend is Backend.TINKER:
        from skyrl_sdk.trainer.tinker_trainer import TinkerTrainer

        return TinkerTrainer(cfg, resume=resume, console=console)
    if ray:
        from skyrl_sdk.trainer.backends.ray import init_local_ray
        from skyrl_sdk.trainer.ray_mode import RayTrainer

        init_local_ray()
        return RayTrainer(cfg, resume=resume)
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer

    return AsyncTrainer(cfg, resume=resume, console=console)
