"""`BenchReport`: what every benchmark returns, printed as a table plus one JSON line."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class BenchReport:
    """The result of one benchmark run."""

    name: str
    """Benchmark name, as given to `skyrl bench`."""
    rows: list[tuple[str, str, str]]
    """Table rows: (measurement, ours, baseline)."""
    result: dict[str, float | int | str | bool | None]
    """The flat JSON object printed on the last line (the keys the benchmark promises)."""
    notes: list[str] = field(default_factory=list)
    """Lines printed under the table (method, caveats)."""

    def print(self, console: Console | None = None, json_line: bool = True) -> None:
        console = console or Console()
        table = Table(
            title=f"skyrl bench {self.name}  ({platform.machine()}, {platform.python_version()})"
        )
        table.add_column("measurement")
        table.add_column("ours", justify="right")
        table.add_column("baseline", justify="right")
        for row in self.rows:
            table.add_row(*row)
        console.print(table)
        for note in self.notes:
            console.print(f"[dim]{note}[/dim]")
        if json_line:
            # print() rather than rich: the last line must be exactly one JSON object.
            print(json.dumps(self.result, default=_jsonable))


def _jsonable(value: Any) -> Any:
    return str(value)
