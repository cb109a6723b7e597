"""`skyrl sandbox exec | ls | reap | audit`.

`exec --json` (field `server`) and `exec --verbose` (a stderr line) say which command server ran
the command: `native` (`_server.c`, compiled from the installed package) or `python`, with the
reason the native one was unavailable (`server_note`).

Imports only typer and `SandboxSpec` (stdlib only) at module level, so `--help` stays fast; the
cap options of `exec` take their defaults and help text from `SandboxSpec`'s own defaults.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import typer

from skyrl_sdk.sandboxes.spec import ExecResult, SandboxSpec

app = typer.Typer(
    help="Run commands in sandboxes; list, reap and audit them.", no_args_is_help=True
)

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SandboxSpec)}
"""SandboxSpec's field defaults: the one source of every default cap shown and used here."""
MiB = 1 << 20


def _fmt(value: float | None, unit: str, scale: float = 1) -> str:
    return "off" if value is None else f"{value / scale:g} {unit}"


def default_caps() -> dict[str, str]:
    """Every default cap of a sandbox, in words (what `skyrl sandbox exec --help` prints)."""
    d = _DEFAULTS
    return {
        "memory": _fmt(d["memory_bytes"], "MiB", MiB),
        "pids": _fmt(d["pids"], "processes"),
        "cpus": _fmt(d["cpus"], "core" if d["cpus"] == 1 else "cores"),
        "cpu time": _fmt(d["cpu_time_s"], "s per command"),
        "disk": _fmt(d["disk_bytes"], "MiB (workspace and /tmp)", MiB),
        "wall time": _fmt(d["timeout_s"], "s per command"),
        "output": _fmt(d["output_limit_bytes"], "KiB per stream", 1024),
    }


def _cap_default(name: str, scale: int = 1) -> float:
    """A CLI default for a cap: SandboxSpec's default in the option's unit; 0 means off."""
    value = _DEFAULTS[name]
    return 0 if value is None else value / scale


def _or_none(value: float, scale: int = 1) -> int | None:
    return None if value == 0 else int(value * scale)


_EXEC_HELP = (
    "Run one command in a fresh sandbox; exit with its status (124 on timeout).\n\n"
    "Default caps: " + "; ".join(f"{k} {v}" for k, v in default_caps().items()) + ". "
    "A cap of 0 turns it off (not for wall time or output)."
)


@app.command("exec", help=_EXEC_HELP)
def exec_command(
    cmd: list[str] = typer.Argument(
        ..., help="The command after `--`: an argv, or one string run with /bin/sh -c."
    ),
    backend: str = typer.Option("bwrap", help="Backend: bwrap, local or docker."),
    network: bool = typer.Option(
        False, "--network", help="Allow outbound network (own namespace, no route to the host)."
    ),
    timeout: float = typer.Option(
        _DEFAULTS["timeout_s"], help="Wall-clock limit of the command in seconds."
    ),
    memory_mb: int = typer.Option(
        int(_cap_default("memory_bytes", MiB)), help="Memory cap in MiB (0: off)."
    ),
    pids: int = typer.Option(
        int(_cap_default("pids")), help="Cap on processes and threads (0: off)."
    ),
    cpus: float = typer.Option(
        _cap_default("cpus"), help="CPU bandwidth in cores, a cgroup quota (0: off)."
    ),
    cpu_time: float = typer.Option(
        _cap_default("cpu_time_s"),
        "--cpu-time",
        help="CPU time per command in seconds, RLIMIT_CPU (0: off).",
    ),
    disk_mb: int = typer.Option(
        int(_cap_default("disk_bytes", MiB)),
        "--disk-mb",
        help="Size cap of the workspace and /tmp in MiB (0: off).",
    ),
    output_kb: int = typer.Option(
        _DEFAULTS["output_limit_bytes"] // 1024,
        "--output-kb",
        help="Output kept per stream in KiB; the rest is cut and marked.",
    ),
    image: str | None = typer.Option(None, help="Image (docker backend)."),
    workspace: Path | None = typer.Option(
        None, help="Host directory to use as the workspace (kept afterwards; no disk cap)."
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object (exit_code, stdout, stderr, timed_out, truncated, backend, "
        "server, server_note) instead of the command's output; the exit status is the same.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Say on stderr which command server ran the command (native or python).",
    ),
) -> None:
    spec = _exec_spec(
        network=network,
        timeout=timeout,
        memory_mb=memory_mb,
        pids=pids,
        cpus=cpus,
        cpu_time=cpu_time,
        disk_mb=disk_mb,
        output_kb=output_kb,
        image=image,
        workspace=workspace,
    )
    command: str | list[str] = cmd[0] if len(cmd) == 1 else list(cmd)
    result, server = _run_once(spec, backend, command, timeout)
    _print_result(result, backend, server, as_json=as_json, verbose=verbose)
    if result.timed_out:
        if not as_json:  # the JSON object says so in `timed_out`
            typer.echo(f"[timed out after {timeout:g}s]", err=True)
        raise typer.Exit(124)
    code = result.exit_code
    raise typer.Exit(128 - code if code < 0 else code)


def _exec_spec(
    *,
    network: bool,
    timeout: float,
    memory_mb: int,
    pids: int,
    cpus: float,
    cpu_time: float,
    disk_mb: int,
    output_kb: int,
    image: str | None,
    workspace: Path | None,
) -> SandboxSpec:
    """The `exec` options as a `SandboxSpec` (`typer.BadParameter` for a bad one)."""
    for name, value in (
        ("--memory-mb", memory_mb),
        ("--pids", pids),
        ("--cpus", cpus),
        ("--cpu-time", cpu_time),
        ("--disk-mb", disk_mb),
    ):
        if value < 0:
            raise typer.BadParameter(f"{name} must be >= 0 (0 turns the cap off), got {value}")
    if output_kb < 1:
        raise typer.BadParameter(f"--output-kb must be >= 1, got {output_kb}")
    try:
        return SandboxSpec(
            network=network,
            timeout_s=timeout,
            memory_bytes=_or_none(memory_mb, MiB),
            pids=_or_none(pids),
            cpus=cpus or None,
            cpu_time_s=cpu_time or None,
            disk_bytes=_or_none(disk_mb, MiB),
            output_limit_bytes=output_kb * 1024,
            image=image,
            workspace_dir=str(workspace) if workspace else None,
        )
    except (TypeError, ValueError) as e:
        raise typer.BadParameter(str(e)) from None


def _run_once(
    spec: SandboxSpec, backend: str, command: str | list[str], timeout: float
) -> tuple[ExecResult, str | None]:
    """Run `command` in a fresh sandbox; the result and which command server ran it (exit 2
    with the error when the sandbox cannot start)."""
    import asyncio

    from skyrl_sdk.sandboxes import BackendUnavailable, SandboxError, create_sandbox

    async def run() -> tuple[ExecResult, str | None]:
        async with create_sandbox(spec, backend) as sandbox:
            result = await sandbox.exec(command, timeout=timeout)
            # Only the bwrap and local backends run our command server (docker execs directly).
            return result, getattr(sandbox, "server_kind", None)

    try:
        return asyncio.run(run())
    except (BackendUnavailable, SandboxError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def _server_note(server: str | None) -> str | None:
    """Why the Python server ran under `auto` (no compiler, a missing `_server.c`, ...), if so."""
    from skyrl_sdk.sandboxes import _native

    note = None
    if server == _native.ServerChoice.PYTHON.value:
        note = _native.unavailable_reason()
        if note is None and _native.server_choice() is _native.ServerChoice.PYTHON:
            note = f"${_native.SERVER_ENV}=python"
    return note


def _print_result(
    result: ExecResult, backend: str, server: str | None, *, as_json: bool, verbose: bool
) -> None:
    """The command's output (and with `verbose` which server ran it), or the JSON object."""
    note = _server_note(server)
    if as_json:
        _print_json(result, backend, server, note)
    else:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        if verbose:
            typer.echo(f"[server: {server or 'none'}{f' ({note})' if note else ''}]", err=True)


def _print_json(result: ExecResult, backend: str, server: str | None, note: str | None) -> None:
    """`exec --json`: one JSON object instead of the command's output."""
    import json

    doc = {
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "backend": backend,
        "server": server,
        "server_note": note,
    }
    typer.echo(json.dumps(doc))


@app.command("ls")
def list_command() -> None:
    """List recorded sandboxes and env workspaces, and whether their owner is alive."""
    import time

    from skyrl_sdk.sandboxes.tracking import owner_alive, records

    rows = records()
    if not rows:
        typer.echo("no sandboxes recorded")
    for r in sorted(rows, key=lambda r: r.created):
        state = "alive" if owner_alive(r.owner_pid, r.owner_start) else "ORPHANED"
        age = time.time() - r.created
        typer.echo(f"{r.id}  {r.backend:9}  owner {r.owner_pid:<7} {state:8}  {age:8.1f}s")


def _is_workspace(record_id: str) -> bool:
    # `Workspace` records are named ws-<token>; sandboxes sbx-<token>.
    return record_id.startswith("ws-")


@app.command("reap")
def reap_command() -> None:
    """Remove sandboxes and env workspaces whose owner died (processes, cgroups, mounts, dirs,
    containers); print one line saying what went."""
    from skyrl_sdk.sandboxes.tracking import reap

    report = reap()
    workspaces = sum(_is_workspace(i) for i in report.reaped)
    sandboxes = len(report.reaped) - workspaces
    typer.echo(
        f"reaped {sandboxes} sandbox{'es' if sandboxes != 1 else ''} and {workspaces} env "
        f"workspace{'s' if workspaces != 1 else ''}; {report.alive} left with live owners"
        + (f"; {len(report.errors)} errors" if report.errors else "")
    )
    for error in report.errors:
        typer.echo(f"error: {error}", err=True)
    if report.errors:
        raise typer.Exit(1)


@app.command("audit")
def audit_command(
    backend: str = typer.Option("bwrap", help="Backend to audit: bwrap, docker or local."),
    json_output: bool = typer.Option(
        False, "--json", help="End with one JSON object on the last line."
    ),
    image: str | None = typer.Option(
        None, help="Image for the docker backend (it needs python3 inside)."
    ),
    probe: list[str] | None = typer.Option(
        None, "--probe", help="Run only this probe (repeatable); default: all."
    ),
) -> None:
    """Run the escape probes against a backend on this machine, one row per probe:
    contained, NOT contained, or not enforced here (e.g. no cgroup controller, not root).
    Exit 1 if anything is NOT contained, 2 if a probe could not run."""
    from skyrl_sdk.sandboxes.audit import audit, print_report
    from skyrl_sdk.sandboxes.spec import BackendUnavailable

    try:
        report = audit(backend, image=image, probes=probe or None)
    except (BackendUnavailable, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    print_report(report, json_line=json_output)
    raise typer.Exit(report.exit_code)
