"""`skyrl export CHECKPOINT --out DIR`: one of our checkpoints as a model directory.

The directory (weights with LoRA merged, config and tokenizer, as `save_pretrained` writes
them) is what `skyrl eval ENV --policy DIR` and `skyrl serve --policy DIR` load, so a trained
or SFT policy is evaluated and served like any other model directory. The checkpoint is read
as `model.init_from` reads it (`trainer.init_from`), on top of the model its run trained.
"""

from __future__ import annotations

from pathlib import Path

import typer

from skyrl_sdk.trainer.init_from import InitFromError, resolve_checkpoint
from skyrl_sdk.trainer.models import load_model


def export_policy(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the policy of `checkpoint` (anything `model.init_from` takes) to `out` as a model
    directory; returns `out`. The run's `config.yaml` says which model it trained."""
    found = resolve_checkpoint(checkpoint)
    if found.run_config is None:
        raise InitFromError(
            f"{found.state_file}: its run directory has no config.yaml, so the model it "
            "trained is unknown (start a run with model.init_from instead)"
        )
    config = found.run_config
    model_cfg = config.model.model_copy(update={"init_from": str(found.state_file)})
    model, tokenizer = load_model(model_cfg, seed=config.seed)
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def export_command(
    checkpoint: str = typer.Argument(
        ..., help="A run directory (its latest checkpoint), checkpoints/, step_N or state.pt."
    ),
    out: str = typer.Option(..., "--out", help="The model directory to write."),
) -> None:
    """Write a checkpoint's policy as a model directory, for `skyrl eval --policy DIR`."""
    try:
        dest = export_policy(checkpoint, out)
    except InitFromError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {dest} (skyrl eval ENV --policy {dest})")
