"""`skyrl sandbox exec | ls | reap`. Imports only typer at module level (keeps `--help` fast)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("exec")
def exec_command(
    cmd: list[str] = typer.Argument(
        ..., help="The command after `--`: an argv, or one string run with /bin/sh -c."
    ),
    backend: str = typer.Option("bwrap", help="Backend: bwrap, local or docker."),
    network: bool = typer.Option(False, "--network", help="Allow network access."),
    timeout: float = typer.Option(30.0, help="Wall-clock limit in seconds."),
    memory_mb: int = typer.Option(512, help="Memory cap in MiB."),
    pids: int = typer.Option(256, help="Cap on processes and threads."),
    image: str | None = typer.Option(None, help="Image (docker backend)."),
    workspace: Path | None = typer.Option(
        None, help="Host directory to use as the workspace (kept afterwards)."
    ),
) -> None:
    """Run one command in a fresh sandbox; exit with its status (124 on timeout)."""
    import asyncio

    from skyrl_sdk.sandboxes import BackendUnavailable, SandboxError, SandboxSpec, create_sandbox

    try:
        spec = SandboxSpec(
            network=network,
            timeout_s=timeout,
            memory_bytes=memory_mb << 20,
            pids=pids,
            image=image,
            workspace_dir=str(workspace) if workspace else None,
        )
    except (TypeError, ValueError) as e:
        raise typer.BadParameter(str(e)) from None
    command: str | list[str] = cmd[0] if len(cmd) == 1 else list(cmd)

    async def run():
        async with create_sandbox(spec, backend) as sandbox:
            return await sandbox.exec(command, timeout=timeout)

    try:
        result = asyncio.run(run())
    except (BackendUnavailable, SandboxError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.timed_out:
        typer.echo(f"[timed out after {timeout:g}s]", err=True)
        raise typer.Exit(124)
    code = result.exit_code
    raise typer.Exit(128 - code if code < 0 else code)


@app.command("ls")
def list_command() -> None:
    """List recorded sandboxes and whether their owner is alive."""
    import time

    from skyrl_sdk.sandboxes.tracking import owner_alive, records

    rows = records()
    if not rows:
        typer.echo("no sandboxes recorded")
    for r in sorted(rows, key=lambda r: r.created):
        state = "alive" if owner_alive(r.owner_pid, r.owner_start) else "ORPHANED"
        age = time.time() - r.created
        typer.echo(f"{r.id}  {r.backend:6}  owner {r.owner_pid:<7} {state:8}  {age:8.1f}s")


@app.command("reap")
def reap_command() -> None:
    """Remove sandboxes whose owner process died (processes, cgroups, dirs, containers)."""
    from skyrl_sdk.sandboxes.tracking import reap

    report = reap()
    typer.echo(f"reaped {len(report.reaped)}, left {report.alive} with live owners")
    for error in report.errors:
        typer.echo(f"error: {error}", err=True)
    if report.errors:
        raise typer.Exit(1)
