"""`skyrl text2sql eval | build`: Text-to-SQL evaluation by execution accuracy.

Only typer (and the standard library) is imported at module level; everything else loads when
a command runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from skyrl_gym.envs.sql.metrics import Metric
    from skyrl_gym.tasks import TaskRow
    from skyrl_sdk.agents.trajectory import Trajectory
    from skyrl_sdk.benchmarks.text2sql.evaluate import EvalReport
    from skyrl_sdk.tools.sql_limits import SQLLimits

app = typer.Typer(help="Text-to-SQL evaluation (Spider, BIRD, SkyRL-SQL).", no_args_is_help=True)

BUNDLED = "bundled"


def _die(message: str, code: int = 2) -> NoReturn:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


@app.command("eval")
def eval_command(
    dataset: str = typer.Option(
        ...,
        "--dataset",
        help="Spider/BIRD dev.json, SkyRL-SQL json(l), our tasks.jsonl, or 'bundled'.",
    ),
    out: Path = typer.Option(..., "--out", help="Folder for results.json."),
    db_root: Path | None = typer.Option(
        None,
        "--db-root",
        help="Folder of the databases (<db_root>/<db_id>/<db_id>.sqlite). Default: the "
        "dataset's folder, or its database/ sub-folder.",
    ),
    predictions: Path | None = typer.Option(
        None, "--predictions", help="SQL per line, JSONL {index|question_id, sql}, or BIRD json."
    ),
    policy: str | None = typer.Option(
        None, "--policy", help="Run the multi-turn agent with this policy spec instead."
    ),
    metric: str = typer.Option("spider", "--metric", help="spider, bird or skyrl."),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Per-query limit in seconds (default: the metric's own)."
    ),
    keep_distinct: bool = typer.Option(
        False, "--keep-distinct", help="spider: do not remove DISTINCT before comparing."
    ),
    tables: Path | None = typer.Option(None, "--tables", help="Spider tables.json (schemas)."),
    workers: int = typer.Option(1, "--workers", help="Questions scored in parallel."),
    max_turns: int = typer.Option(6, "--max-turns", help="--policy: turns per episode."),
    max_tokens: int = typer.Option(
        3000, "--max-tokens", min=1, help="--policy: tokens the policy may generate per turn."
    ),
    concurrency: int = typer.Option(8, "--concurrency", help="--policy: episodes at once."),
    trials: int = typer.Option(
        1,
        "--trials",
        "-k",
        min=1,
        help="--policy: play every question K times; results.json adds the interval, "
        "pass@k, pass^k and flip rate (items and accuracy stay trial 0's).",
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="--policy: sampling seed (trial k's is derived from it)."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N questions."),
    # Defaults come from SQLLimits (not imported here: the CLI loads lazily).
    max_rows: int | None = typer.Option(
        None, "--max-rows", help="Row cap per query; a prediction past it scores 0 [10000]."
    ),
    max_result_mb: float | None = typer.Option(
        None, "--max-result-mb", help="Result size cap per query, MiB of text and blobs [16]."
    ),
    max_memory_mb: float | None = typer.Option(
        None, "--max-memory-mb", help="Memory one query may add to the process, MiB [256]."
    ),
) -> None:
    """Score predictions (or a policy) by execution accuracy; write OUT/results.json."""
    from skyrl_sdk.benchmarks.text2sql.evaluate import write_report

    limits = _sql_limits(max_rows, max_result_mb, max_memory_mb)
    if (predictions is None) == (policy is None):
        _die("give exactly one of --predictions FILE or --policy SPEC")
    scoring = _Scoring(_metric(metric), timeout, limits)
    questions = _load_questions(dataset, db_root, tables, limit)
    if predictions is not None:
        report = _score_file(
            questions, predictions, scoring, keep_distinct=keep_distinct, workers=workers
        )
    else:
        assert policy is not None
        report = _play_policy(
            questions, policy, scoring, out,
            max_turns=max_turns, max_tokens=max_tokens, concurrency=concurrency,
            trials=trials, seed=seed,
        )  # fmt: skip
    path = write_report(report, out)
    _print_summary(report, path)


@dataclass(frozen=True)
class _Questions:
    """The questions an eval scores and where their databases are."""

    rows: list[TaskRow]
    """The dataset's rows, in file order (the first `--limit` of them)."""
    path: Path
    """The dataset file."""
    db_root: Path
    """The databases' folder (`<db_root>/<db_id>/<db_id>.sqlite`)."""

    @property
    def extra(self) -> dict[str, str]:
        """What results.json records of where the questions came from."""
        return {"dataset": str(self.path), "db_root": str(self.db_root)}


@dataclass(frozen=True)
class _Scoring:
    """How every answer is scored."""

    metric: Metric
    """spider, bird or skyrl."""
    timeout_s: float | None
    """Per-query limit in seconds (None: the metric's own)."""
    limits: SQLLimits
    """Row, result-size and memory caps of every query."""


def _sql_limits(
    max_rows: int | None, max_result_mb: float | None, max_memory_mb: float | None
) -> SQLLimits:
    """The query caps the options set (the rest `SQLLimits`' defaults); a bad one: exit 2."""
    from skyrl_sdk.tools.sql_limits import SQLLimits

    caps: dict[str, int] = {}
    if max_rows is not None:
        caps["max_rows"] = max_rows
    if max_result_mb is not None:
        caps["max_result_bytes"] = int(max_result_mb * 2**20)
    if max_memory_mb is not None:
        caps["max_memory_growth_bytes"] = int(max_memory_mb * 2**20)
    try:
        return SQLLimits(**caps)
    except ValueError as e:
        _die(str(e))


def _metric(name: str) -> Metric:
    """`--metric` (an unknown one: exit 2, naming the choices)."""
    from skyrl_gym.envs.sql.metrics import Metric

    try:
        return Metric(name)
    except ValueError:
        _die(f"unknown metric {name!r}; choose from {', '.join(m.value for m in Metric)}")


def _load_questions(
    dataset: str, db_root: Path | None, tables: Path | None, limit: int | None
) -> _Questions:
    """`--dataset` (or the bundled benchmark) read, cut to `--limit`; the databases default
    to the dataset's folder, or its database/ sub-folder (a dataset that cannot load: exit 2)."""
    from skyrl_gym.envs.sql.loaders import load_dataset
    from skyrl_gym.tasks import TaskError

    if dataset == BUNDLED:
        from skyrl_gym.envs.sql.bundled import bundled_root

        root = bundled_root()
        dataset_path = root / "tasks.jsonl"
        db_root = db_root or root
    else:
        dataset_path = Path(dataset)
    try:
        rows = load_dataset(dataset_path, tables_json=tables)
    except (TaskError, OSError, ValueError, KeyError) as e:
        _die(f"cannot load {dataset_path}: {e}")
    if limit is not None:
        rows = rows[:limit]
    if db_root is None:
        parent = dataset_path.parent
        db_root = parent / "database" if (parent / "database").is_dir() else parent
    return _Questions(rows, dataset_path, db_root)


def _score_file(
    questions: _Questions,
    predictions: Path,
    scoring: _Scoring,
    *,
    keep_distinct: bool,
    workers: int,
) -> EvalReport:
    """`--predictions`: score the file's SQL, one per question (a bad file: exit 2)."""
    from skyrl_sdk.benchmarks.text2sql.evaluate import (
        PredictionsError,
        read_predictions,
        score_predictions,
    )

    try:
        preds = read_predictions(predictions, questions.rows)
    except PredictionsError as e:
        _die(str(e))
    extra = {**questions.extra, "predictions": str(predictions)}
    return score_predictions(
        questions.rows, preds, db_root=questions.db_root, metric=scoring.metric,
        timeout_s=scoring.timeout_s, keep_distinct=keep_distinct, workers=workers,
        extra=extra, limits=scoring.limits,
    )  # fmt: skip


def _play_policy(
    questions: _Questions,
    policy: str,
    scoring: _Scoring,
    out: Path,
    *,
    max_turns: int,
    max_tokens: int,
    concurrency: int,
    trials: int = 1,
    seed: int | None = None,
) -> EvalReport:
    """`--policy`: one multi-turn episode per question (and trial), with a progress bar of the episodes
    done and their mean env reward (a policy that cannot load: exit 2)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from skyrl_sdk.benchmarks.text2sql.policy_eval import PolicyUnavailable, evaluate_policy

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("env reward {task.fields[reward]:.3f}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        total = len(questions.rows) * trials
        bar = progress.add_task("text2sql episodes", total=total, reward=0.0)
        done = [0, 0.0]  # episodes finished, their summed env reward

        def on_done(trajectory: Trajectory) -> None:
            done[0] += 1
            done[1] += trajectory.reward
            progress.update(bar, advance=1, reward=done[1] / done[0])

        try:
            return evaluate_policy(
                questions.rows, policy, db_root=questions.db_root, metric=scoring.metric,
                timeout_s=scoring.timeout_s, max_turns=max_turns, max_tokens=max_tokens,
                concurrency=concurrency, out_dir=out, extra=questions.extra,
                limits=scoring.limits, on_done=on_done, trials=trials, seed=seed,
            )  # fmt: skip
        except PolicyUnavailable as e:
            progress.stop()
            _die(str(e))


def _print_summary(report, path: Path) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.table import Table

    console = Console()
    data = report.to_json()
    table = Table(title=f"text2sql eval: metric={data['metric']}  mode={data['mode']}")
    table.add_column("group")
    table.add_column("n", justify="right")
    table.add_column("accuracy", justify="right")
    table.add_row("all", str(data["n"]), f"{data['accuracy']:.3f}", style="bold")
    for title in ("by_db", "by_difficulty"):
        for name, bucket in data[title].items():
            table.add_row(f"{title[3:]}: {name}", str(bucket["n"]), f"{bucket['accuracy']:.3f}")
    console.print(table)
    console.print(f"statuses: {data['statuses']}")
    if "per_task" in data:  # --policy: the statistics over the trials
        from skyrl_sdk.stats import TrialStats

        stats = TrialStats.from_json(data)
        for label, value in stats.lines():
            console.print(f"{label}: {value}", markup=False)
        if stats.note:
            console.print(f"note: {stats.note}", markup=False)
    _print_wrong(console, report)
    console.print(f"wrote {path}")


WRONG_SHOWN = 10
"""Wrong answers the summary shows (all are in results.json)."""


def _print_wrong(console, report) -> None:  # type: ignore[no-untyped-def]
    """The first `WRONG_SHOWN` wrong answers: the predicted SQL, the gold rows and the
    predicted rows side by side (the first rows of each)."""
    from rich.markup import escape
    from rich.table import Table

    wrong = [i for i in report.items if i.status == "wrong"]
    if not wrong:
        return
    table = Table(title=f"wrong answers ({min(len(wrong), WRONG_SHOWN)} of {len(wrong)})")
    table.add_column("task")
    table.add_column("predicted SQL")
    table.add_column("gold rows")
    table.add_column("predicted rows")
    for item in wrong[:WRONG_SHOWN]:
        table.add_row(
            escape(item.task_id),
            escape(item.prediction or ""),
            escape(_rows_text(item.gold_rows)),
            escape(_rows_text(item.pred_rows)),
        )
    console.print(table)


def _rows_text(rows: list[list[object]] | None) -> str:
    """A few result rows, one per line ("(no rows)" when empty)."""
    if rows is None:
        return "(not available)"
    if not rows:
        return "(no rows)"
    return "\n".join(", ".join(repr(v) if isinstance(v, str) else str(v) for v in r) for r in rows)


@app.command("build")
def build_command(
    out: Path = typer.Option(..., "--out", help="Folder to build the bundled benchmark into."),
) -> None:
    """Build the bundled offline benchmark (SQLite databases, dev.json, tasks.jsonl, gold.sql)."""
    from skyrl_gym.envs.sql.bundled.build import build
    from skyrl_gym.envs.sql.bundled.questions import QUESTIONS

    build(out)
    typer.echo(f"built {len(QUESTIONS)} questions in {out}")
