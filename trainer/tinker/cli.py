"""`skyrl tinker serve`: run the Tinker-compatible server on local models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="A local server for the Tinker training API.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """A local server for the Tinker training API (the official `tinker` SDK talks to it)."""


TINY_NAME = "skyrl/tiny"
"""Name of the built-in tiny model (served when no --models file is given)."""


SMOLLM2_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""Served too when its converted directory is already in the cache (`trainer.models`)."""


def default_models() -> list:
    """The built-in tiny model (built locally), plus SmolLM2-135M-Instruct if already cached."""
    from agents.tiny import tiny_model_dir
    from skyrl_gym.cache import cache_dir
    from trainer.tinker.backend import BaseModelSpec

    specs = [BaseModelSpec(name=TINY_NAME, path=tiny_model_dir())]
    smollm2 = cache_dir() / "smollm2-135m-instruct"
    if (smollm2 / ".complete").exists():
        specs.append(BaseModelSpec(name=SMOLLM2_NAME, path=smollm2))
    return specs


def load_models(path: Path) -> list:
    """Base models from a JSON or YAML file: a list of `{name, path, max_context_length?}`."""
    from trainer.tinker.backend import BaseModelSpec

    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        rows = yaml.safe_load(text)
    else:
        rows = json.loads(text)
    if isinstance(rows, dict):
        rows = rows.get("models", [])
    return [
        BaseModelSpec(
            name=r["name"],
            path=Path(r["path"]).expanduser(),
            max_context_length=int(r.get("max_context_length", 2048)),
        )
        for r in rows
    ]


@app.command()
def serve(
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    models: Annotated[
        Path | None, typer.Option(help="JSON/YAML list of {name, path} base models.")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option(help="Where futures (SQLite) and checkpoints are kept.")
    ] = None,
) -> None:
    """Serve the Tinker API; point the SDK at it with `TINKER_BASE_URL=http://HOST:PORT`."""
    import uvicorn

    from trainer.tinker.server import ServerConfig, create_app

    specs = load_models(models) if models else default_models()
    config = ServerConfig(models=specs)
    if state_dir is not None:
        config.state_dir = state_dir
    typer.echo(f"serving {[s.name for s in specs]} on http://{host}:{port}")
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")
