"""The `skyrl` command line.

Each command (group) lives in the package that owns it and is listed in `COMMAND_GROUPS`. It is
imported only when invoked, so `skyrl env check` never pays for torch, and a command whose
optional dependencies are missing fails alone, with the import error, instead of breaking the
whole CLI. Command modules still import nothing heavy at module level (help lists them all).
"""

from __future__ import annotations

import importlib

import click
import typer
from typer.core import TyperGroup

# (name, "module:attr", help): attr is a Typer app (a command group) or a function (one
# command). Packages add their own line here.
COMMAND_GROUPS: list[tuple[str, str, str]] = [
    ("env", "skyrl_gym.cli.env_cmd:app", "List, check and play environments."),
    ("sandbox", "skyrl_sdk.sandboxes.cli:app", "Run commands in sandboxes; list and reap them."),
    (
        "bench",
        "skyrl_sdk.benchmarks.cli:bench",
        "Performance benchmarks (`skyrl bench NAME --json`).",
    ),
    (
        "text2sql",
        "skyrl_sdk.benchmarks.text2sql.cli:app",
        "Text-to-SQL evaluation (Spider, BIRD, SkyRL-SQL).",
    ),
    (
        "eval",
        "skyrl_sdk.agents.cli:eval_command",
        "Evaluate a policy on an env (results.json, trajectories).",
    ),
    (
        "view",
        "skyrl_sdk.agents.cli:view_command",
        "Render trajectories.jsonl as a static HTML report.",
    ),
    (
        "serve",
        "skyrl_sdk.agents.cli:serve_command",
        "Serve a local model over an OpenAI-compatible API.",
    ),
    ("search", "skyrl_gym.envs.search.cli:app", "Build, serve and query BM25 search indexes."),
    (
        "swebench",
        "skyrl_sdk.benchmarks.swebench.cli:app",
        "SWE-bench: evaluate patches, run agents.",
    ),
    (
        "harbor",
        "skyrl_sdk.benchmarks.harbor.cli:app",
        "Run and grade Harbor task folders (Terminal-Bench style).",
    ),
    (
        "train",
        "skyrl_sdk.trainer.cli:train_command",
        "Train a policy with the async RL trainer (YAML config).",
    ),
    (
        "tinker",
        "skyrl_sdk.trainer.tinker.cli:app",
        "Serve the Tinker training API on local models.",
    ),
]

_LAZY = {name: (target, help_text) for name, target, help_text in COMMAND_GROUPS}


def _load(name: str) -> click.Command:
    target, help_text = _LAZY[name]
    module, _, attr = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except Exception as e:  # a broken or uninstalled extra must not take the CLI down
        message = f"`skyrl {name}` is unavailable: {type(e).__name__}: {e}"

        @click.command(
            name,
            help=f"(unavailable) {help_text}",
            context_settings={"ignore_unknown_options": True},
        )
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def unavailable(args: tuple[str, ...]) -> None:
            raise click.ClickException(message)

        return unavailable
    if not isinstance(obj, typer.Typer):
        single = typer.Typer()
        single.command(name, help=help_text)(obj)
        obj = single
    command = typer.main.get_command(obj)
    command.name = name
    command.help = command.help or help_text
    return command


class _LazyGroup(TyperGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY:
            return _load(cmd_name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    name="skyrl",
    cls=_LazyGroup,
    help="Train and evaluate multi-turn, tool-using LLM agents in sandboxed environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Train and evaluate multi-turn, tool-using LLM agents in sandboxed environments."""


@app.command()
def demo(
    model: str = typer.Option(
        "smollm2",
        help="'smollm2' (SmolLM2-135M-Instruct + LoRA on `lookup-chat`, ~5 min) or "
        "'tiny' (a 100k-parameter model on `lookup`, ~1 min).",
    ),
    steps: int | None = typer.Option(None, help="Optimizer steps (default: the model's)."),
    seed: int = typer.Option(0, help="Seeds data order, sampling and initialisation."),
) -> None:
    """RL-train a small model on CPU and write runs/demo/report.md (reward curve, metrics,
    trajectory viewer)."""
    from skyrl_sdk.trainer.demo import PRESETS, run_demo

    if model not in PRESETS:
        raise typer.BadParameter(f"choose from {', '.join(PRESETS)}", param_hint="--model")
    run_demo(steps=steps, model=model, seed=seed)


def main() -> None:
    app()
