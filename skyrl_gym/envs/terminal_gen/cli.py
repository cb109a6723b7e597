"""`skyrl terminal gen`: write generated shell tasks as Harbor task folders and check them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    help="Generated terminal tasks (Harbor task folders) for training and held-out evaluation.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()

MANIFEST = "tasks.json"
"""The manifest `gen` writes next to the task folders."""


@app.callback()
def _group() -> None:
    """Generated terminal tasks (Harbor task folders) for training and held-out evaluation."""


@app.command("gen")
def gen_command(
    n: int = typer.Option(..., "--n", help="How many tasks (families taken in turn)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the task folders to."),
    seed: int = typer.Option(0, "--seed", help="First seed (within the split)."),
    families: str | None = typer.Option(
        None, "--families", help="Comma-separated family names (default: all; see `families`)."
    ),
    split: str = typer.Option(
        "train", "--split", help="train or heldout: disjoint seed ranges, so no shared task."
    ),
    check: bool = typer.Option(
        True, "--check/--no-check", help="Check every task in the sandbox (oracle 1, nop 0, ...)."
    ),
    concurrency: int = typer.Option(4, "--concurrency", "-j", help="Checks running at once."),
) -> None:
    """Write N Harbor task folders under OUT; each is checked (oracle scores 1; nop, `ls`
    and another seed's solution score 0) in the runtime `skyrl harbor run` uses."""
    from skyrl_gym.envs.terminal_gen.generate import (
        SPLITS,
        plan,
        resolve_families,
        write_tasks,
    )

    try:
        names = resolve_families(families)
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        per_family = -(-n // len(names)) if n else 0
        seeds = SPLITS[split].seeds(per_family, seed)
        if concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {concurrency}")
        specs = plan(n, seeds.start, names)
    except ValueError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    dirs = write_tasks(specs, out)
    manifest = [
        {
            "task_id": s.task_id,
            "family": s.family,
            "seed": s.seed,
            "difficulty": s.difficulty,
            "category": s.category.value,
            "split": split,
        }
        for s in specs
    ]
    console.print(f"wrote {len(dirs)} task(s) to {escape(str(out))}")
    failed: list[str] = []
    if check and dirs:
        from skyrl_gym.envs.terminal_gen.validate import check_tasks

        results = asyncio.run(check_tasks(dirs, concurrency=concurrency))
        by_task: dict[str, dict[str, float | None]] = {}
        for r in results:
            by_task.setdefault(r.task, {})[r.probe.value] = r.reward
            if not r.ok:
                failed.append(
                    f"{r.task}: {r.probe.value} gave {r.reward} ({r.message.strip()[:200]})"
                )
        for row in manifest:
            row["checks"] = by_task.get(row["task_id"], {})
        console.print(
            f"checked {len(dirs)} task(s) with {len(results)} probe(s): "
            f"{len(results) - len(failed)} as expected"
        )
    (Path(out) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if failed:
        for line in failed:
            console.print(f"[red]check failed:[/red] {escape(line)}")
        raise typer.Exit(1)


@app.command("families")
def families_command() -> None:
    """List the task families (name, category, difficulty)."""
    from skyrl_gym.envs.terminal_gen.families import FAMILIES, make_spec

    for name in FAMILIES:
        spec = make_spec(name, 0)
        doc = (FAMILIES[name].__doc__ or "").strip().splitlines()[0]
        console.print(f"{name:16} {spec.category.value:12} {spec.difficulty}  {escape(doc)}")
