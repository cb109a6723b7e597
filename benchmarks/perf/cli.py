"""`skyrl bench NAME [--json]`."""

from __future__ import annotations

import importlib

import typer

from skyrl_sdk.benchmarks.perf import BENCHMARKS


def bench(
    name: str = typer.Argument(..., help="Benchmark to run: " + ", ".join(sorted(BENCHMARKS))),
    json_output: bool = typer.Option(
        False, "--json", help="End with one JSON object on the last line."
    ),
) -> None:
    """Run a performance benchmark against a baseline measured in the same run."""
    if name not in BENCHMARKS:
        raise typer.BadParameter(
            f"unknown benchmark {name!r}; choose from {', '.join(sorted(BENCHMARKS))}"
        )
    module, _, attr = BENCHMARKS[name].partition(":")
    report = getattr(importlib.import_module(module), attr)()
    report.print(json_line=json_output)
