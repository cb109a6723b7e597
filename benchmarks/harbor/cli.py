"""`skyrl harbor run`: play Harbor task folders with an agent in our sandboxes and grade them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.root_cache import RootCache
    from skyrl_sdk.agents.command_agent import CommandAgent
    from skyrl_sdk.benchmarks.harbor.job import JobConfig, JobResult, TrialResult

app = typer.Typer(
    help="Run Harbor task folders (Terminal-Bench style) in sandboxes and grade them.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()

BUNDLED = "bundled"
"""`--path` value naming the bundled example tasks (as in `skyrl text2sql eval` and swebench)."""


def bundled_path() -> Path:
    """The bundled Harbor task folders, inside the installed package."""
    from skyrl_gym.envs.harbor.env import BUNDLED_TASKS

    return BUNDLED_TASKS


@app.callback()
def _group() -> None:
    """Run Harbor task folders (Terminal-Bench style) in sandboxes and grade them."""


# `skyrl harbor run`'s options, defined once here so that the command reads as its steps
# (a typer option is a parameter's default; each is used by one parameter only).
_PATH_OPTION = typer.Option(
    ...,
    "--path",
    "-p",
    metavar="PATH",
    help=f"A task folder, a folder of tasks, or {BUNDLED!r}: the bundled example tasks "
    "(a local folder of that name: ./bundled).",
)
_AGENT_OPTION = typer.Option(
    "oracle",
    "--agent",
    "-a",
    help="oracle, nop, llm, or 'command:CMD' (an agent program run inside the trial's "
    "environment against --policy, served over OpenAI's API).",
)
_POLICY_OPTION = typer.Option(
    None,
    "--policy",
    help="llm and command agents: policy SPEC (tiny, DIR, URL or scripted:FILE).",
)
_AGENT_VENV_OPTION = typer.Option(
    None, "--agent-venv", help="command agent: the harness's virtualenv (bound read-only)."
)
_AGENT_BIND_OPTION = typer.Option(
    [],
    "--agent-bind",
    metavar="DIR",
    help="command agent: a host directory bound read-only at its path (repeatable).",
)
_AGENT_MEMORY_OPTION = typer.Option(
    None,
    "--agent-memory-mb",
    min=16,
    help="command agent: memory cap of the agent phase's sandbox (default: the task's).",
)
_BACKEND_OPTION = typer.Option("bwrap", "--backend", "-b", help="bwrap or docker.")
_PULL_OPTION = typer.Option(
    False,
    "--pull",
    help="docker: pull a task's \\[environment].docker_image (and its Dockerfile's FROM "
    "images) when the engine lacks them, within the task's build_timeout_sec; off by "
    "default (a missing image is an environment error naming it).",
)
_CONCURRENCY_OPTION = typer.Option(4, "--n-concurrent", "-n", help="Trials running at once.")
_OUT_OPTION = typer.Option(..., "--out", "-o", help="Output folder (job.json, trial folders).")
_ROOTFS_OPTION = typer.Option(None, help="bwrap: root filesystem to use instead of the host's.")
_TIMEOUT_MULTIPLIER_OPTION = typer.Option(
    1.0, help="Scale build (build_timeout_sec), agent and verifier timeouts."
)
_REQUIRE_EXIT_ZERO_OPTION = typer.Option(
    False,
    "--require-exit-zero",
    help="Grade every task as if its task.toml set [verifier] require_exit_zero = true: "
    "a reward counts only when test.sh exited 0 and nothing it started outlived its parent.",
)
_PASS_ENV_OPTION = typer.Option(
    [],
    "--pass-env",
    metavar="NAME",
    help="Let task.toml's ${NAME} take the host's NAME (repeatable). None by default: "
    "unlike Harbor, a task cannot copy host secrets into its environment; an unallowed "
    "${NAME} is its :-default, else empty, with a note.",
)
_TRIALS_OPTION = typer.Option(
    1,
    "--trials",
    "-k",
    "--n-attempts",
    min=1,
    metavar="K",
    help="Trials per task (Harbor's -k/--n-attempts); the summary gives the success "
    "interval, pass@k, pass^k and flip rate (success: reward >= 1).",
)
_SEED_OPTION = typer.Option(
    None,
    "--seed",
    help="llm agent: sampling seed of trial 0; trial k gets its own seed derived from it.",
)
_MAX_TURNS_OPTION = typer.Option(30, help="llm agent: assistant turns per trial.")
_MAX_TOKENS_OPTION = typer.Option(1024, help="llm agent: tokens per turn.")


@app.command("run")
def run_command(
    path_arg: str = _PATH_OPTION,
    agent: str = _AGENT_OPTION,
    policy: str | None = _POLICY_OPTION,
    agent_venv: Path | None = _AGENT_VENV_OPTION,
    agent_binds: list[Path] = _AGENT_BIND_OPTION,
    agent_memory_mb: int | None = _AGENT_MEMORY_OPTION,
    backend: str = _BACKEND_OPTION,
    pull: bool = _PULL_OPTION,
    concurrency: int = _CONCURRENCY_OPTION,
    out: Path = _OUT_OPTION,
    rootfs: str | None = _ROOTFS_OPTION,
    timeout_multiplier: float = _TIMEOUT_MULTIPLIER_OPTION,
    require_exit_zero: bool = _REQUIRE_EXIT_ZERO_OPTION,
    pass_env: list[str] = _PASS_ENV_OPTION,
    max_turns: int = _MAX_TURNS_OPTION,
    max_tokens: int = _MAX_TOKENS_OPTION,
    trials: int = _TRIALS_OPTION,
    seed: int | None = _SEED_OPTION,
) -> None:
    """Run every task under PATH with one agent; write DIR/job.json and a trial folder each."""
    from skyrl_sdk.benchmarks.harbor.job import JobConfig, summary_table

    path = _task_path(path_arg)
    with _usage_errors():
        command = _command_agent(agent, agent_venv, agent_binds, agent_memory_mb)
        config = JobConfig(
            path=path,
            out=out,
            agent="command" if command is not None else agent,
            command=command,
            backend=backend,
            concurrency=concurrency,
            policy=policy,
            rootfs=rootfs,
            timeout_multiplier=timeout_multiplier,
            require_exit_zero=require_exit_zero,
            pass_env=tuple(pass_env),
            pull=pull,
            max_turns=max_turns,
            max_tokens=max_tokens,
            trials=trials,
            seed=seed,
        )
    _check_backend(config)
    job = _run_job(config)
    console.print(summary_table(job))
    _print_statistics(job)
    console.print(f"wrote {escape(str(out / 'job.json'))}")


def _print_statistics(job: JobResult) -> None:
    """The job's success statistics, one `label: value` line each (`skyrl_sdk.stats`)."""
    stats = job.statistics()
    if stats is None:
        return
    console.print("success (reward >= 1):")
    for label, value in stats.lines():
        console.print(f"  {escape(label)}: {escape(value)}")
    if stats.note:
        console.print(f"  note: {escape(stats.note)}")


def _task_path(path_arg: str) -> Path:
    """`--path`: the bundled tasks, or a folder that exists (else a usage error)."""
    path = bundled_path() if path_arg == BUNDLED else Path(path_arg)
    if not path.exists():
        raise typer.BadParameter(f"{path} does not exist", param_hint="--path")
    return path


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    """A bad option (a `ValueError` or `CommandAgentError` inside): print it, exit 2."""
    from skyrl_sdk.agents.command_agent import CommandAgentError

    try:
        yield
    except (ValueError, CommandAgentError) as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None


def _command_agent(
    agent: str, venv: Path | None, binds: list[Path], memory_mb: int | None
) -> CommandAgent | None:
    """The command agent `--agent 'command:CMD'` names (None for another agent, which
    `--agent-venv`, `--agent-bind` and `--agent-memory-mb` do not apply to)."""
    from skyrl_sdk.agents.command_agent import parse_agent

    if agent.startswith("command:"):
        return parse_agent(
            agent,
            venv=str(venv) if venv else None,
            binds=[str(b) for b in binds],
            memory_bytes=memory_mb << 20 if memory_mb else None,
        )
    if venv or binds or memory_mb:
        raise ValueError(
            "--agent-venv, --agent-bind and --agent-memory-mb only apply to --agent 'command:CMD'"
        )
    return None


def _check_backend(config: JobConfig) -> None:
    """docker: the engine answers (else `skipped:` and exit 2, before any trial)."""
    if config.backend.value != "docker":
        return
    from skyrl_sdk.sandboxes import BackendUnavailable
    from skyrl_sdk.sandboxes.docker_backend import docker_client

    try:
        docker_client().close()
    except BackendUnavailable as e:
        console.print(
            f"[yellow]skipped:[/yellow] the docker backend cannot run here: {escape(str(e))}"
        )
        raise typer.Exit(2) from None


def _progress(trial: TrialResult) -> None:
    """One line per finished trial: its reward and error."""
    reward = "-" if trial.reward is None else f"{trial.reward:g}"
    error = f" [red]{trial.error.value}[/red]" if trial.error else ""
    console.print(f"  {escape(trial.task)}: reward {reward}{error}")


def _run_job(config: JobConfig) -> JobResult:
    """Run the job, printing each trial as it ends (a missing or bad task path: exit 2)."""
    from skyrl_sdk.benchmarks.harbor.job import run_job

    try:
        return asyncio.run(run_job(config, on_trial=_progress))
    except (FileNotFoundError, ValueError) as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None


@app.command("lint")
def lint_command(
    path: Path = typer.Argument(..., help="A task folder or a folder of tasks."),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON (rule ids)."),
) -> None:
    """Flag verifier patterns an agent can forge (exit 1 on findings, 0 when clean)."""
    import json

    from skyrl_gym.envs.harbor.lint import RULE_FIXES, lint_task
    from skyrl_gym.envs.harbor.task import find_task_dirs

    try:
        tasks = find_task_dirs(path)
    except FileNotFoundError as e:
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None
    base = tasks[0].parent
    findings = [f for task in tasks for f in lint_task(task, relative_to=base)]
    if as_json:
        doc = {"tasks": len(tasks), "findings": [f.to_dict() for f in findings]}
        typer.echo(json.dumps(doc, indent=2))
    else:
        for f in findings:
            console.print(escape(f.format()), highlight=False, soft_wrap=True)
        for rule in sorted({f.rule for f in findings}):
            console.print(f"  {rule.value}: {escape(RULE_FIXES[rule])}", highlight=False)
        verdict = f"{len(findings)} finding(s)" if findings else "clean"
        console.print(f"{len(tasks)} task(s): {verdict}")
    if findings:
        raise typer.Exit(1)


@app.command("migrate")
def migrate_command(
    src: Path = typer.Argument(..., help="A Terminal-Bench 1 task folder, or a folder of them."),
    dest: Path = typer.Argument(..., help="Output folder: one Harbor task folder per task."),
) -> None:
    """Convert Terminal-Bench 1 folders (task.yaml, run-tests.sh, solution.sh) to Harbor
    task folders (Harbor's own command is `harbor task migrate`)."""
    from skyrl_gym.envs.harbor.task import TaskFormatError
    from skyrl_gym.envs.harbor.tb1 import is_tb1_dir, migrate_tb1

    if not src.is_dir():
        console.print(f"[red]error:[/red] no folder at {escape(str(src))}")
        raise typer.Exit(2)
    sources = (
        [src]
        if is_tb1_dir(src)
        else [p for p in sorted(src.iterdir()) if p.is_dir() and is_tb1_dir(p)]
    )
    if not sources:
        console.print(f"[red]error:[/red] {escape(str(src))} holds no Terminal-Bench 1 folders")
        raise typer.Exit(2)
    failed = 0
    for source in sources:
        try:
            written = migrate_tb1(source, dest / source.name)
        except (TaskFormatError, FileExistsError, OSError) as e:
            failed += 1
            console.print(f"  {escape(source.name)}: [red]{escape(str(e))}[/red]")
            continue
        console.print(f"  {escape(source.name)} -> {escape(str(written))}")
    console.print(
        f"{len(sources) - failed} of {len(sources)} task(s) migrated to {escape(str(dest))}"
    )
    if failed:
        raise typer.Exit(1)


cache_app = typer.Typer(
    help="The cache of built task roots ($SKYRL_CACHE/harbor-roots).", no_args_is_help=True
)
app.add_typer(cache_app, name="cache")


def _size_text(size: int) -> str:
    """`size` bytes for a person: 1.5 MiB."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # not reached


@dataclass(frozen=True)
class CacheRow:
    """One built task root, as `skyrl harbor cache list/prune` show it."""

    key: str
    """The cache key (a hash of the Dockerfile, its build context and the base root)."""
    size_bytes: int
    """Disk blocks the root takes."""
    last_used: str
    """When a trial last used it (ISO 8601, UTC)."""

    def to_json(self) -> dict[str, object]:
        """The `--json` form."""
        return {"key": self.key, "bytes": self.size_bytes, "last_used": self.last_used}


def _cache_rows(entries: list[tuple[str, int, float]]) -> list[CacheRow]:
    from datetime import UTC, datetime

    return [
        CacheRow(key, size, datetime.fromtimestamp(used, UTC).isoformat(timespec="seconds"))
        for key, size, used in entries
    ]


def _cache_table(title: str, rows: list[CacheRow]) -> Table:
    table = Table(title=title)
    table.add_column("key", no_wrap=True)
    table.add_column("size", justify="right")
    table.add_column("last used (UTC)")
    for row in rows:
        table.add_row(row.key, _size_text(row.size_bytes), row.last_used)
    return table


def _open_cache() -> RootCache:
    from skyrl_gym.envs.harbor.root_cache import RootCache

    try:
        return RootCache.default()
    except ValueError as e:  # a bad $SKYRL_HARBOR_ROOTS_MAX_BYTES
        console.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from None


@cache_app.command("list")
def cache_list_command(
    as_json: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """List the built task roots: key, size, last used (least recently used first)."""
    import json

    cache = _open_cache()
    rows = _cache_rows(cache.entries())
    total = sum(r.size_bytes for r in rows)
    if as_json:
        doc = {
            "directory": str(cache.directory),
            "max_bytes": cache.max_bytes,
            "total_bytes": total,
            "entries": [r.to_json() for r in rows],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    console.print(_cache_table(f"harbor roots in {escape(str(cache.directory))}", rows))
    console.print(
        f"{len(rows)} root(s), {_size_text(total)} of {_size_text(cache.max_bytes)}",
        highlight=False,
    )


@cache_app.command("prune")
def cache_prune_command(
    as_json: bool = typer.Option(False, "--json", help="Print what was removed as JSON."),
) -> None:
    """Remove every built task root no running trial holds (they are rebuilt when needed)."""
    import json

    cache = _open_cache()
    before = {key: (size, used) for key, size, used in cache.entries()}
    removed = set(cache.prune())
    gone = _cache_rows([(k, *before[k]) for k in before if k in removed])
    kept = _cache_rows([(k, *before[k]) for k in before if k not in removed])
    freed = sum(r.size_bytes for r in gone)
    if as_json:
        doc = {
            "directory": str(cache.directory),
            "removed": [r.to_json() for r in gone],
            "kept_in_use": [r.to_json() for r in kept],
            "freed_bytes": freed,
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    if gone:
        console.print(_cache_table("removed", gone))
    if kept:
        console.print(_cache_table("kept (in use by a running trial)", kept))
    console.print(
        f"removed {len(gone)} root(s), freed {_size_text(freed)}; {len(kept)} in use kept",
        highlight=False,
    )
