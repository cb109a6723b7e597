"""`skyrl swebench eval | run | bundled`: SWE-bench evaluation from the command line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    help="SWE-bench: evaluate predictions, run agents, build the bundled instances.",
    no_args_is_help=True,
)
console = Console()

INSTANCES_HELP = "Instances (JSON or JSONL, SWE-bench schema), or 'bundled'."
REPOS_HELP = "Directory of git repositories: DIR/<owner>__<name> or DIR/<name>."


def _die(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def _instances(source: str, ids: str | None, repos: Path | None) -> tuple[list, str | None]:
    from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE, ensure_repos
    from skyrl_gym.envs.swe.instances import InstanceError, load_instances

    wanted = [i for i in (ids or "").split(",") if i]
    try:
        if source == "bundled":
            repos_dir = str(repos) if repos else str(ensure_repos())
            return load_instances(INSTANCES_FILE, wanted), repos_dir
        return load_instances(source, wanted), str(repos) if repos else None
    except InstanceError as e:
        _die(str(e))
        raise


def _print_trials(report: dict, out: Path) -> None:
    """A run of several trials: each trial's resolved count, then the statistics."""
    from skyrl_sdk.stats import TrialStats

    for k, trial in report["per_trial"].items():
        console.print(
            f"trial {k}: resolved {len(trial['resolved_ids'])}/{len(trial['instance_ids'])} "
            f"({escape(str(out / trial['report']))})"
        )
    stats = TrialStats.from_json(report)
    for label, value in stats.lines():
        console.print(f"  {escape(label)}: {escape(value)}")
    console.print(f"wrote {escape(str(out / 'report.json'))}")


def _print(report: dict, out: Path) -> None:
    if "per_trial" in report:
        _print_trials(report, out)
        return
    table = Table(title="SWE-bench")
    table.add_column("instance")
    table.add_column("outcome")
    table.add_column("note", overflow="fold")
    for iid, row in sorted(report["instances"].items()):
        style = "green" if row["resolved"] else "red"
        table.add_row(iid, f"[{style}]{row['outcome']}[/]", escape(row.get("error") or ""))
    console.print(table)
    console.print(
        f"resolved {report['resolved_instances']}/{report['total_instances']} "
        f"(completed {report['completed_instances']}, empty {report['empty_patch_instances']}, "
        f"errors {report['error_instances']}); wrote {escape(str(out / 'report.json'))}"
    )


@app.command("eval")
def eval_command(
    instances: str = typer.Option(..., "--instances", "-i", help=INSTANCES_HELP),
    predictions: str = typer.Option(
        ..., "--predictions", "-p", help="Predictions (JSON/JSONL), or 'gold'."
    ),
    repos: Path | None = typer.Option(None, "--repos", "-r", help=REPOS_HELP),
    out: Path = typer.Option(Path("runs/swebench"), "--out", "-o", help="Output directory."),
    backend: str = typer.Option("bwrap", help="Sandbox backend: bwrap, local or docker."),
    workers: int = typer.Option(2, "--workers", "-w", help="Instances evaluated at once."),
    timeout: float = typer.Option(1800.0, help="Seconds per instance."),
    clone: bool = typer.Option(False, help="Fetch repositories missing from --repos from GitHub."),
    ids: str | None = typer.Option(None, help="Comma-separated instance ids to evaluate."),
    package: list[str] = typer.Option(
        [],
        "--package",
        help="bwrap: another distribution the tests need inside the sandbox, copied from this "
        "Python's environment into the read-only package directory next to pytest (repeatable).",
    ),
) -> None:
    """Evaluate predictions: OUT/report.json (official keys) and OUT/logs/<instance_id>/."""
    from skyrl_gym.envs.swe.harness import HarnessConfig, run_evaluation
    from skyrl_gym.envs.swe.instances import InstanceError, load_predictions

    chosen, repos_dir = _instances(instances, ids, repos)
    try:
        preds = load_predictions(predictions, chosen)
    except InstanceError as e:
        _die(str(e))
    from skyrl_gym.envs.swe.packages import DEFAULT_PACKAGES

    config = HarnessConfig(
        backend=backend,
        repos_dir=repos_dir,
        allow_clone=clone,
        timeout_s=timeout,
        workers=workers,
        packages=(*DEFAULT_PACKAGES, *package),
    )

    def progress(result) -> None:
        console.print(f"  {escape(result.instance_id)}: {result.outcome.value}")

    run = asyncio.run(run_evaluation(chosen, preds, out, config, on_done=progress))
    _print(run.report, out)


@app.command("run")
def run_command(
    instances: str = typer.Option(..., "--instances", "-i", help=INSTANCES_HELP),
    policy: str = typer.Option(
        ..., "--policy", "-p", help="Policy SPEC: tiny, DIR, URL or scripted:FILE."
    ),
    repos: Path | None = typer.Option(None, "--repos", "-r", help=REPOS_HELP),
    out: Path = typer.Option(Path("runs/swebench-run"), "--out", "-o", help="Output directory."),
    backend: str = typer.Option("bwrap", help="Sandbox backend: bwrap, local or docker."),
    concurrency: int = typer.Option(2, "--concurrency", "-c", help="Episodes running at once."),
    max_turns: int = typer.Option(30, help="Assistant turns per episode."),
    max_tokens: int = typer.Option(1024, help="Tokens per assistant turn."),
    timeout: float | None = typer.Option(None, help="Wall-clock seconds per episode."),
    eval_timeout: float = typer.Option(1800.0, help="Seconds for each instance's evaluation."),
    temperature: float = typer.Option(0.0, help="Sampling temperature (0: greedy)."),
    tokenizer: str | None = typer.Option(
        None, help="Tokenizer dir (or 'tiny') for URL/scripted policies."
    ),
    api: str = typer.Option("auto", help="For URLs: auto, tokens or chat."),
    model: str | None = typer.Option(None, help="For URLs: the served model name."),
    clone: bool = typer.Option(False, help="Fetch repositories missing from --repos from GitHub."),
    ids: str | None = typer.Option(None, help="Comma-separated instance ids to run."),
    trials: int = typer.Option(
        1,
        "--trials",
        "-k",
        min=1,
        help="Play every instance K times (OUT/trial-<k>/ each; OUT/report.json: the "
        "resolved rate's interval, pass@k, pass^k and flip rate).",
    ),
    seed: int | None = typer.Option(None, help="Sampling seed (trial k's is derived from it)."),
) -> None:
    """Run an agent on each instance in the `swe` env, then write the evaluation report."""
    from skyrl_sdk.agents.evaluate import EvalError
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.policy_spec import load_error, load_policy
    from skyrl_sdk.agents.rollout import RolloutLimits
    from skyrl_sdk.benchmarks.swebench.agent_run import run_agent

    chosen, repos_dir = _instances(instances, ids, repos)
    try:
        the_policy = load_policy(policy, tokenizer=tokenizer, api=api, model=model).policy
    except (OSError, ValueError) as e:  # PolicySpecError is a ValueError
        _die(load_error(policy, e))

    async def go():
        try:
            return await run_agent(
                chosen,
                the_policy,
                out,
                repos=repos_dir,
                backend=backend,
                concurrency=concurrency,
                limits=RolloutLimits(max_turns=max_turns, max_tokens=max_tokens, timeout=timeout),
                sampling=SamplingParams(temperature=temperature, seed=seed),
                allow_clone=clone,
                eval_timeout_s=eval_timeout,
                on_done=lambda t: console.print(
                    f"  {escape(t.task_id)}: reward {t.reward:g} ({t.stop_reason.value})"
                ),
                trials=trials,
            )
        finally:
            close = getattr(the_policy, "aclose", None)
            if close is not None:
                await close()

    try:
        run = asyncio.run(go())
    except EvalError as e:
        _die(str(e))
    _print(run.report, out)


@app.command("bundled")
def bundled_command(
    repos: Path = typer.Option(..., "--repos", "-r", help="Empty directory for the repositories."),
    instances: Path | None = typer.Option(
        None, "--instances", help="Also write the instances here."
    ),
) -> None:
    """Build the bundled offline repositories (and optionally their instances file)."""
    from skyrl_gym.envs.swe.bundled.build import main

    main(["--repos", str(repos), *(["--instances", str(instances)] if instances else [])])
