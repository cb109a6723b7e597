"""`skyrl env list | check ID | play ID`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

if TYPE_CHECKING:
    from skyrl_sdk.tools.messages import Messages

app = typer.Typer(help="List, check and play environments.", no_args_is_help=True)
console = Console()

ENV_ID_HELP = "A registered env id (see `skyrl env list`) or an entry point 'module:Class'."


IMPORT_HELP = "Import MODULE first (repeatable), so its `skyrl_gym.register()` calls run."
TASKS_HELP = (
    "Task rows the env plays (JSONL or parquet; SkyRL rows too), given to the env as tasks=."
)


def _factory(
    env_id: str, imports: list[str] | None = None, tasks: Path | None = None
) -> Callable[[], Any]:
    """A zero-argument env factory for a registered id or a 'module:Class' entry point;
    with `tasks`, every env is built with `tasks=<the file's rows>`."""
    import skyrl_gym
    from skyrl_gym.registry import resolve
    from skyrl_gym.tasks import load_tasks

    # Resolve now, so an import error is reported once and not inside every check.
    target = resolve(env_id, imports=imports or (), from_cwd=True)
    if tasks is None:
        _build_once(env_id, lambda: skyrl_gym.make(target))
        return lambda: skyrl_gym.make(target)
    # Validated once, here, against the fields the env's rows need (one line naming them).
    required = getattr(target.load(), "required_fields", ())
    rows = load_tasks(tasks, required=tuple(required) if isinstance(required, tuple) else ())
    try:
        skyrl_gym.make(target, tasks=rows).close()  # fail once, here, if tasks= is not taken
    except TypeError as e:
        raise TasksNotTaken(f"env {env_id!r} does not take --tasks ({e})") from None
    return lambda: skyrl_gym.make(target, tasks=rows)


class EnvBuildError(RuntimeError):
    """The env's constructor raised: every check (every episode) would fail the same way."""


def _build_once(env_id: str, build: Callable[[], Any]) -> None:
    """Build and close one env, so a constructor that raises is one line, not a failure in
    each of the checks (e.g. a multi-argument tool in a format that takes one argument)."""
    try:
        build().close()
    except Exception as e:
        raise EnvBuildError(f"env {env_id!r} cannot be built: {type(e).__name__}: {e}") from e


class TasksNotTaken(ValueError):
    """The env's constructor has no `tasks` argument, so `--tasks` cannot be applied."""


def _die(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(2)


@app.command("list")
def list_envs(
    imports: list[str] = typer.Option([], "--import", metavar="MODULE", help=IMPORT_HELP),
) -> None:
    """List registered environments (with --import, those MODULE registers too)."""
    import importlib
    import os

    import skyrl_gym

    if imports and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `resolve(from_cwd=True)`: the user's own modules
    for module_name in imports:
        try:
            importlib.import_module(module_name)
        except ImportError as e:
            _die(f"--import: cannot import module {module_name!r} ({type(e).__name__}: {e})")

    table = Table(title="registered environments")
    table.add_column("id", style="bold")
    table.add_column("max turns", justify="right")
    table.add_column("description")
    for env_id, spec in sorted(skyrl_gym.registry.items()):
        table.add_row(env_id, str(spec.max_turns or "-"), spec.description)
    console.print(table)


@app.command("check")
def check(
    env_id: str = typer.Argument(..., help=ENV_ID_HELP),
    imports: list[str] = typer.Option([], "--import", metavar="MODULE", help=IMPORT_HELP),
    tasks: Path | None = typer.Option(None, "--tasks", metavar="FILE", help=TASKS_HELP),
) -> None:
    """Run the env checker; exit 1 if any invariant fails."""
    from skyrl_gym.checker import run_checks
    from skyrl_gym.registry import EntryPointError, UnknownEnvError
    from skyrl_gym.tasks import TaskError

    try:
        factory = _factory(env_id, imports, tasks)
    except (UnknownEnvError, EntryPointError, TaskError, TasksNotTaken) as e:
        _die(str(e))
    except EnvBuildError as e:  # the env is broken, not the command line: a failed check
        console.print(f"[bold red]FAIL:[/] {escape(str(e))}")
        raise typer.Exit(1) from None
    results = run_checks(factory)
    table = Table(title=f"skyrl env check {env_id}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("ms", justify="right")
    table.add_column("detail")
    for r in results:
        mark = "[green]pass[/]" if r.passed else "[bold red]FAIL[/]"
        if r.passed and r.warning:
            mark = "[yellow]warn[/]"
        detail = r.message or r.warning
        table.add_row(r.name, mark, f"{r.duration_s * 1000:.1f}", escape(detail))
    console.print(table)
    for r in results:
        if r.warning:
            console.print(f"[yellow]warning:[/] {r.name}: {escape(r.warning)}")
    failed = [r for r in results if not r.passed]
    if failed:
        console.print(f"[bold red]{len(failed)} of {len(results)} checks failed[/]")
        raise typer.Exit(1)
    warned = sum(bool(r.warning) for r in results)
    note = f" ({warned} with a warning)" if warned else ""
    console.print(f"[green]all {len(results)} checks passed[/]{note}")


def _show_messages(messages: Messages) -> None:
    styles = {"system": "magenta", "user": "cyan", "tool": "yellow", "assistant": "green"}
    for m in messages:
        title = m["role"] + (f" ({m['name']})" if "name" in m else "")
        console.print(
            Panel(
                escape(m["content"]),
                title=title,
                border_style=styles.get(m["role"], "white"),
                title_align="left",
            )
        )


def _read_action() -> str | None:
    """One assistant turn from stdin; a line ending in a backslash continues the reply."""
    lines: list[str] = []
    while True:
        console.print("[bold green]assistant>[/] " if not lines else "[dim]...[/] ", end="")
        line = sys.stdin.readline()
        if not line:
            return None if not lines else "\n".join(lines)
        line = line.rstrip("\n")
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        return "\n".join(lines)


@app.command("play")
def play(
    env_id: str = typer.Argument(..., help=ENV_ID_HELP),
    seed: int | None = typer.Option(None, help="Seed for reset (picks the task)."),
    task_id: str | None = typer.Option(
        None,
        "--task",
        help="Play this task_id from the env's dataset (an env without tasks: seed-<n>, as "
        "`skyrl eval` names its episodes).",
    ),
    imports: list[str] = typer.Option([], "--import", metavar="MODULE", help=IMPORT_HELP),
    tasks: Path | None = typer.Option(None, "--tasks", metavar="FILE", help=TASKS_HELP),
) -> None:
    """Play an env by hand: you type the assistant's replies.

    End a line with a backslash to continue a reply on the next line. Commands: /reset, /quit.
    """
    from skyrl_gym.core import ResetNeeded
    from skyrl_gym.registry import EntryPointError, UnknownEnvError
    from skyrl_gym.tasks import SEED_TASK_PREFIX, TaskError

    try:
        env = _factory(env_id, imports, tasks)()
    except (UnknownEnvError, EntryPointError, TaskError, TasksNotTaken, EnvBuildError) as e:
        _die(str(e))
    options = None
    if task_id is not None:
        env_tasks = getattr(env.unwrapped, "tasks", ())
        rows = [t for t in env_tasks if str(t["task_id"]) == task_id]
        seed_of = task_id.removeprefix(SEED_TASK_PREFIX)
        if not rows and not env_tasks and seed_of.isdigit() and seed is None:
            seed = int(seed_of)  # an env played by seeds: task seed-<n> is reset(seed=n)
        elif not rows:
            env.close()
            _die(f"--task: env {env_id!r} has no task {task_id!r}")
        else:
            options = {"task": rows[0]}
    try:
        messages, info = env.reset(seed=seed, options=options)
        console.print(f"[dim]episode started: {json.dumps(info, default=str)}[/]")
        _show_messages(messages)
        total = 0.0
        while True:
            action = _read_action()
            if action is None or action.strip() == "/quit":
                console.print("[dim]bye[/]")
                return
            if action.strip() == "/reset":
                messages, info = env.reset(options=options)
                total = 0.0
                console.print(f"[dim]episode started: {json.dumps(info, default=str)}[/]")
                _show_messages(messages)
                continue
            try:
                messages, reward, terminated, truncated, info = env.step(action)
            except ResetNeeded as e:
                console.print(f"[yellow]{escape(str(e))}[/] (type /reset)")
                continue
            total += reward
            _show_messages(messages)
            if info.get("parse_error"):
                console.print(f"[yellow]parse error:[/] {escape(json.dumps(info['parse_error']))}")
            console.print(
                f"[bold]reward[/] {reward:g}  [bold]return[/] {total:g}  "
                f"terminated={terminated} truncated={truncated}"
            )
            if terminated or truncated:
                episode = info.get("episode", {})
                console.print(
                    Panel(escape(json.dumps(episode, indent=2, default=str)), title="episode over")
                )
                console.print("[dim]/reset for a new episode, /quit to leave[/]")
    finally:
        env.close()
