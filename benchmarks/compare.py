"""`skyrl compare RUN_A RUN_B`: is B better than A, or is the gap noise?

A run is what an evaluation wrote: `skyrl eval`'s `results.json`, `skyrl harbor run`'s
`job.json`, `skyrl swebench run`'s `report.json` or `skyrl text2sql eval`'s `results.json`
(a file, or the folder holding it). Both
runs must be of one kind. Their outcomes are paired on the (task id, trial) pairs both played,
and `skyrl_sdk.stats.compare_runs` gives the mean paired difference with its 95% interval (a
bootstrap that resamples tasks), the tasks that improved, regressed or flipped, and a verdict;
with none, the tasks needed to detect the observed difference at 80% power. The last line of
the output is the whole comparison as JSON.

Success is each kind's own verdict: the env's episode success (`results.json`), a reward of
at least 1 (`job.json`), a resolved instance (`report.json`), a correct answer (text2sql).
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from skyrl_sdk.stats import compare_runs

console = Console()


class RunKind(enum.StrEnum):
    """What wrote a run's file."""

    EVAL = "eval"
    """`skyrl eval` (and `skyrl swebench run`'s agent loop): `results.json`."""
    HARBOR = "harbor"
    """`skyrl harbor run`: `job.json`."""
    SWEBENCH = "swebench"
    """`skyrl swebench run | eval`: `report.json`."""
    TEXT2SQL = "text2sql"
    """`skyrl text2sql eval`: a `results.json` of scored items."""


FILES: tuple[tuple[str, RunKind], ...] = (
    ("report.json", RunKind.SWEBENCH),
    ("job.json", RunKind.HARBOR),
    ("results.json", RunKind.EVAL),
)
"""The file a run folder is read from, first found first (a SWE-bench run folder also holds
its agent loop's results.json: its report is the run's verdict)."""

MAX_RUN_FILE_BYTES = 256 << 20
"""The largest run file read (256 MiB): a bigger one is refused before it is read, rather than
loaded whole into memory (a run of 100,000 episodes is a few tens of MiB)."""


class CompareError(ValueError):
    """A run cannot be read, or two runs cannot be compared."""


@dataclass(frozen=True)
class RunOutcomes:
    """One run's outcomes, ready to pair."""

    path: Path
    """The file read."""
    kind: RunKind
    """What wrote it."""
    outcomes: dict[tuple[str, int], bool]
    """Success per (task id, trial)."""

    @property
    def tasks(self) -> int:
        """Distinct tasks played."""
        return len({task for task, _ in self.outcomes})

    def describe(self) -> dict[str, object]:
        """Path, kind and size (the JSON line's `a` and `b`)."""
        return {"path": str(self.path), "kind": self.kind.value, "tasks": self.tasks}


def read_run(path: str | Path) -> RunOutcomes:
    """The outcomes of the run at `path` (a run file or its folder); `CompareError` says why
    it cannot be read."""
    file = Path(path)
    if file.is_dir():
        found = next(((file / name, kind) for name, kind in FILES if (file / name).is_file()), None)
        if found is None:
            names = ", ".join(name for name, _ in FILES)
            raise CompareError(f"{file}: no run file in this folder (looked for {names})")
        file, kind = found
        data = _read_json(file)
    elif not file.is_file():
        raise CompareError(f"{file}: no such file or folder")
    else:
        data = _read_json(file)
        kind = _kind_of(file, data)
    if kind is RunKind.EVAL and isinstance(data, dict) and "items" in data and "metric" in data:
        kind = RunKind.TEXT2SQL
    try:
        outcomes = _READERS[kind](data)
    except (KeyError, TypeError, AttributeError) as e:
        raise CompareError(f"{file}: not a {kind.value} run file (missing {e})") from None
    if not outcomes:
        raise CompareError(f"{file}: the run has no tasks")
    return RunOutcomes(file, kind, outcomes)


def _read_json(file: Path) -> object:
    """The JSON in `file`, read up to `MAX_RUN_FILE_BYTES`; `CompareError` says why not (a
    malformed file's error names its line and column)."""
    cap = MAX_RUN_FILE_BYTES
    try:
        with file.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            # The size refuses a big file unread; the bounded read, one that grew since.
            raw = f.read(cap + 1) if size <= cap else b""
    except OSError as e:
        raise CompareError(f"{file}: cannot be read ({type(e).__name__}: {e})") from None
    if size > cap or len(raw) > cap:
        raise CompareError(
            f"{file}: {max(size, len(raw)):,} bytes, over the {_bytes(cap)} a run file may "
            "hold (MAX_RUN_FILE_BYTES); not read"
        )
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError
        raise CompareError(f"{file}: not a JSON run file ({type(e).__name__}: {e})") from None


def _bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n:,} bytes"


def _kind_of(file: Path, data: object) -> RunKind:
    for name, kind in FILES:
        if file.name == name:
            return kind
    if isinstance(data, dict):  # a renamed copy: tell the kinds apart by their keys
        if "episodes" in data and "summary" in data:
            return RunKind.EVAL
        if isinstance(data.get("trials"), list) and "agent" in data:
            return RunKind.HARBOR
        if "items" in data and "metric" in data:
            return RunKind.TEXT2SQL
        if "resolved_ids" in data or "per_trial" in data:
            return RunKind.SWEBENCH
    raise CompareError(
        f"{file}: not a run file (results.json of skyrl eval, job.json of skyrl harbor run, "
        "report.json of skyrl swebench run)"
    )


def _read_eval(data: dict) -> dict[tuple[str, int], bool]:
    return {
        (str(row["task_id"]), int(row.get("trial", 0))): bool(row["success"])
        for row in data["episodes"]
    }


def _read_harbor(data: dict) -> dict[tuple[str, int], bool]:
    out: dict[tuple[str, int], bool] = {}
    for row in data["trials"]:
        reward = row.get("reward")
        out[(str(row["task"]), int(row.get("trial", 0)))] = reward is not None and reward >= 1
    return out


def _read_swebench(data: dict) -> dict[tuple[str, int], bool]:
    # Several trials: each trial's instance ids and resolved ids; one: the official report.
    trials = data.get("per_trial") or {"0": data}
    out: dict[tuple[str, int], bool] = {}
    for trial, report in trials.items():
        resolved = set(report["resolved_ids"])
        ids = report.get("instance_ids") or [*report.get("instances", {}), *resolved]
        ids = [*ids, *report.get("incomplete_ids", [])]
        for iid in ids:
            out[(str(iid), int(trial))] = iid in resolved
    return out


def _read_text2sql(data: dict) -> dict[tuple[str, int], bool]:
    # Several trials: each trial's task ids and correct ids; one: the scored items.
    if "per_trial" in data:
        out: dict[tuple[str, int], bool] = {}
        for trial, report in data["per_trial"].items():
            correct = set(report["correct_ids"])
            for task in report["task_ids"]:
                out[(str(task), int(trial))] = task in correct
        return out
    return {(str(item["task_id"]), 0): bool(item["correct"]) for item in data["items"]}


_READERS = {
    RunKind.TEXT2SQL: _read_text2sql,
    RunKind.EVAL: _read_eval,
    RunKind.HARBOR: _read_harbor,
    RunKind.SWEBENCH: _read_swebench,
}


def _fail(message: str) -> typer.Exit:
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(2)


def compare_command(
    run_a: Path = typer.Argument(..., help="Run A: results.json, job.json or report.json."),
    run_b: Path = typer.Argument(..., help="Run B: a run of the same kind as A."),
    seed: int = typer.Option(0, help="Seed of the paired bootstrap."),
) -> None:
    """Compare two evaluation runs task by task: the paired difference B - A with its 95%
    interval, tasks improved, regressed and flipped, and a verdict; JSON on the last line.

    Exits 2 when a run cannot be read (missing, malformed, or over `MAX_RUN_FILE_BYTES`), the
    runs are of different kinds, or they share no task.
    """
    try:
        a, b = read_run(run_a), read_run(run_b)
    except CompareError as e:
        raise _fail(str(e)) from None
    if a.kind is not b.kind:
        raise _fail(
            f"cannot compare runs of two kinds: A is an {a.kind.value} run ({a.path}), "
            f"B is a {b.kind.value} run ({b.path})"
        )
    try:
        result = compare_runs(a.outcomes, b.outcomes, seed=seed)
    except ValueError:
        raise _fail(f"{a.path} and {b.path} have no task (and trial) in common") from None
    low, high = result.ci95.low * 100, result.ci95.high * 100
    lines = [
        f"A: {a.path} ({a.kind.value}, {a.tasks} tasks)",
        f"B: {b.path} ({b.kind.value}, {b.tasks} tasks)",
        f"paired: {result.tasks} tasks, {result.pairs} (task, trial) pairs",
        f"success: A {result.mean_a:.1%}, B {result.mean_b:.1%}",
        f"B - A: {result.difference * 100:+.1f} points "
        f"(95% interval {low:+.1f} .. {high:+.1f}, paired bootstrap over tasks)",
        f"tasks: {result.improved} improved, {result.regressed} regressed, "
        f"{result.flipped} flipped",
        f"verdict: {result.sentence()}",
    ]
    for line in lines:
        console.print(escape(line), soft_wrap=True)
    payload = {"a": a.describe(), "b": b.describe(), **result.to_json()}
    print(json.dumps(payload), flush=True)
