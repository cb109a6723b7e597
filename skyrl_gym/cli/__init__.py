"""The `skyrl` command line.

Each command group lives in the package that owns it and is listed in `COMMAND_GROUPS`; a group
module must import nothing heavy at module level (torch, ray, docker...) so `skyrl --help` stays
fast.
"""

from __future__ import annotations

import importlib

import typer

# (name, "module:attr", help): attr is a Typer app (a command group) or a function (one
# command). Packages add their own line here.
COMMAND_GROUPS: list[tuple[str, str, str]] = [
    ("env", "skyrl_gym.cli.env_cmd:app", "List, check and play environments."),
    ("bench", "benchmarks.cli:bench", "Performance benchmarks (`skyrl bench NAME --json`)."),
    ("search", "skyrl_gym.envs.search.cli:app", "Build, serve and query BM25 search indexes."),
]

app = typer.Typer(
    name="skyrl",
    help="Train and evaluate multi-turn, tool-using LLM agents in sandboxed environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def demo(episodes: int = typer.Option(16, help="Episodes to run.")) -> None:
    """Run the main job on embedded defaults (no downloads, CPU only)."""
    from skyrl_gym.demo import run_demo

    run_demo(episodes=episodes)


for _name, _target, _help in COMMAND_GROUPS:
    _module, _, _attr = _target.partition(":")
    _obj = getattr(importlib.import_module(_module), _attr)
    if isinstance(_obj, typer.Typer):
        app.add_typer(_obj, name=_name, help=_help)
    else:
        app.command(_name, help=_help)(_obj)


def main() -> None:
    app()
