"""The `skyrl` command line: command groups found through Python entry points.

Every command (group) is an entry point of the group `skyrl.commands` (`COMMANDS_GROUP`): the
name is the command, the value `"module:attr"` names a Typer app (a command group) or a function
(one command). This package ships its own in pyproject.toml, next to the other packages'
commands, and any installed distribution can add one the same way:

    [project.entry-points."skyrl.commands"]
    hello = "my_package.cli:app"

`skyrl --help` reads only the installed metadata plus each target's source text (its help,
parsed with `ast`, never executed), so it stays fast and imports no command module. A module is
imported when its command runs; if that import fails (a missing optional extra, a bug in a
plugin), only that command fails, with the import error, and every other command still works.

Nothing here imports a package above `skyrl_gym`: the upper packages plug themselves in.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.machinery
import importlib.metadata
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import typer
from typer.core import TyperGroup

COMMANDS_GROUP = "skyrl.commands"
"""The entry-point group every `skyrl` command is declared in."""


@dataclass(frozen=True)
class CommandEntry:
    """One `skyrl` command, as declared by an installed distribution."""

    name: str
    """The command name (`skyrl NAME`)."""
    target: str
    """`"module:attr"`: a Typer app or a function; imported only when the command runs."""
    distribution: str = ""
    """The distribution that declared it (shown when the command cannot be loaded)."""


def discover_commands() -> dict[str, CommandEntry]:
    """Every installed `skyrl.commands` entry point, by command name (metadata only).

    Two distributions declaring the same name: the first found wins, as with console scripts.
    """
    found: dict[str, CommandEntry] = {}
    for ep in importlib.metadata.entry_points(group=COMMANDS_GROUP):
        dist = getattr(ep, "dist", None)
        found.setdefault(ep.name, CommandEntry(ep.name, ep.value, dist.name if dist else ""))
    return found


@functools.cache
def _commands() -> dict[str, CommandEntry]:
    return discover_commands()


def _module_source(module: str) -> Path | None:
    """The source file of `module`, found without executing it or its parent packages.

    `importlib.util.find_spec` would import the parents (some `__init__` modules are not cheap);
    asking the meta-path finders level by level gives the same answer from the file system.
    """
    path: list[str] | None = None
    spec = None
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        loaded = sys.modules.get(name)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else None
        if spec is None:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(name, path) if find is not None else None
                if spec is not None:
                    break
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _keyword_str(call: ast.expr, keyword: str) -> str:
    if isinstance(call, ast.Call):
        for kw in call.keywords:
            if kw.arg == keyword and isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
    return ""


def static_help(target: str) -> str:
    """The short help of `"module:attr"`, read from the module's source without running it.

    A function: its docstring. A Typer app: its `help=`, else its `@app.callback()` docstring.
    Otherwise the module docstring. Empty when the source cannot be found or parsed.
    """
    module, _, attr = target.partition(":")
    source = _module_source(module)
    if source is None:
        return ""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attr:
            return _first_paragraph(ast.get_docstring(node))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == attr for t in node.targets
        ):
            if text := _keyword_str(node.value, "help"):
                return _first_paragraph(text)
            for other in tree.body:  # `@app.callback()` documents the group
                if isinstance(other, ast.FunctionDef) and any(
                    isinstance(d, ast.Call)
                    and isinstance(d.func, ast.Attribute)
                    and d.func.attr == "callback"
                    and isinstance(d.func.value, ast.Name)
                    and d.func.value.id == attr
                    for d in other.decorator_list
                ):
                    return _first_paragraph(_keyword_str(other.decorator_list[0], "help")) or (
                        _first_paragraph(ast.get_docstring(other))
                    )
    return _first_paragraph(ast.get_docstring(tree))


def load_command(entry: CommandEntry) -> click.Command:
    """Import `entry`'s target and build its click command; a failure yields a command that
    reports it (exit 1) instead of raising, so one broken extra never breaks the others."""
    module, _, attr = entry.target.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
        if not attr:
            raise AttributeError(f"entry point {entry.target!r} names no object ('module:attr')")
    except Exception as e:
        origin = f" (from {entry.distribution})" if entry.distribution else ""
        message = f"`skyrl {entry.name}` is unavailable{origin}: {type(e).__name__}: {e}"

        @click.command(
            entry.name,
            help=f"(unavailable) {static_help(entry.target)}",
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
            add_help_option=False,
        )
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def unavailable(args: tuple[str, ...]) -> None:
            raise click.ClickException(message)

        return unavailable
    if isinstance(obj, click.Command):
        command = obj
    else:
        if not isinstance(obj, typer.Typer):
            single = typer.Typer()
            single.command(entry.name)(obj)
            obj = single
        command = typer.main.get_command(obj)
    command.name = entry.name
    command.help = command.help or static_help(entry.target)
    return command


class _Listed(click.Command):
    """A command as `skyrl --help` lists it: name and help only, nothing imported."""


class _EntryPointGroup(TyperGroup):
    """The root group: commands defined here plus every `skyrl.commands` entry point."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = _commands().get(cmd_name)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        # Help listings ask for every command: give them a placeholder. `resolve_command`
        # (only the command actually run) swaps in the real one.
        return _Listed(cmd_name, help=static_help(entry.target))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, _Listed) and name in _commands():
            command = load_command(_commands()[name])
        return name, command, rest


app = typer.Typer(
    name="skyrl",
    cls=_EntryPointGroup,
    help="Train and evaluate multi-turn, tool-using LLM agents in sandboxed environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Train and evaluate multi-turn, tool-using LLM agents in sandboxed environments."""


def main() -> None:
    """The `skyrl` console script. A command that needs an optional extra which is not
    installed prints one line naming it (exit 1) instead of a traceback."""
    try:
        app()
    except ModuleNotFoundError as e:
        from skyrl_gym.extras import missing_module_message

        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        message = missing_module_message(e, f"`skyrl {command}`" if command else "this")
        if message is None:  # not a package of ours: a bug, keep the traceback
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(1)
