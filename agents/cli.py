"""`skyrl eval`, `skyrl view` and `skyrl serve`.

Nothing heavy is imported at module level: torch and transformers load only when a command
needs a model, so `skyrl --help` stays fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from skyrl_sdk.http_guard import API_KEY_ENV, DEFAULT_MAX_REQUEST_BYTES

if TYPE_CHECKING:  # at run time these load only when a command needs them
    from skyrl_sdk.agents.policy_spec import LoadedPolicy
    from skyrl_sdk.agents.serving import ServeConfig

console = Console()


def _die(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


# `skyrl eval`'s arguments and options (kept out of the signature so that it stays readable).
_EVAL_ENV_ID = typer.Argument(
    ..., help="A registered env id (see `skyrl env list`) or an entry point 'module:Class'."
)
_EVAL_POLICY = typer.Option(
    ..., "--policy", "-p", help="Policy SPEC: tiny, DIR, URL or scripted:FILE."
)
_EVAL_TASKS = typer.Option(
    None,
    "--tasks",
    metavar="FILE",
    help="Task rows to play (JSONL or parquet, plain rows with task_id or SkyRL rows; "
    "default: the env's own).",
)
_EVAL_NUM = typer.Option(
    None,
    "--num",
    "-n",
    min=1,
    help="Evaluate the first N tasks; an env without tasks plays seeds 0..N-1.",
)
_EVAL_SEED_OFFSET = typer.Option(
    None,
    "--seed-offset",
    min=0,
    metavar="K",
    help="Envs played by seeds (no task list): play seeds K..K+N-1 instead of 0..N-1.",
)
_EVAL_ENV_KWARGS = typer.Option(
    [],
    "--env-kwarg",
    metavar="KEY=VALUE",
    help="Pass KEY=VALUE to the env's constructor (repeatable; VALUE is read as JSON when "
    "it parses, else as text), e.g. --env-kwarg tool_format=hermes.",
)
_EVAL_CONCURRENCY = typer.Option(8, "--concurrency", "-c", help="Episodes running at once.")
_EVAL_OUT = typer.Option(Path("runs/eval"), "--out", "-o", help="Output directory.")
_EVAL_RESUME = typer.Option(
    False, "--resume", help="Run only missing or errored episodes (same env and policy)."
)
_EVAL_TRIALS = typer.Option(
    1,
    "--trials",
    "-k",
    min=1,
    metavar="K",
    help="Play every task K times (trial k samples with a seed derived from --seed and k; "
    "the env's seed stays the task's) and report the interval, pass@k, pass^k and flip rate.",
)
_EVAL_MAX_TURNS = typer.Option(
    None, min=1, help="Assistant turns per episode (default: the env's limit, else 8)."
)
_EVAL_MAX_TOKENS = typer.Option(256, help="Tokens per assistant turn.")
_EVAL_TIMEOUT = typer.Option(None, help="Wall-clock seconds per episode.")
_EVAL_TEMPERATURE = typer.Option(1.0, help="Sampling temperature (0: greedy).")
_EVAL_SEED = typer.Option(None, help="Sampling seed.")
_EVAL_TOKENIZER = typer.Option(
    None, help="Tokenizer dir (or 'tiny') for URL / scripted policies: enables token ids."
)
_EVAL_API = typer.Option("auto", help="For URLs: auto, tokens or chat.")
_EVAL_MODEL = typer.Option(None, help="For URLs: the served model name.")
_EVAL_IMPORTS = typer.Option(
    [],
    "--import",
    metavar="MODULE",
    help="Import MODULE first (repeatable), so its `skyrl_gym.register()` calls run.",
)
_EVAL_AGENT = typer.Option(
    "loop",
    "--agent",
    help="'loop' (our agent loop) or 'command:CMD': run CMD inside each episode's sandbox "
    "against the policy served over OpenAI's API (OPENAI_BASE_URL, OPENAI_API_KEY); "
    "the env's grader scores; the captured tokens are the trajectory. --timeout is "
    "CMD's wall-clock limit (default 600 s).",
)
_EVAL_AGENT_VENV = typer.Option(
    None, "--agent-venv", help="command agents: the harness's virtualenv (bound read-only)."
)
_EVAL_AGENT_BINDS = typer.Option(
    [],
    "--agent-bind",
    metavar="DIR",
    help="command agents: a host directory bound read-only at its path (repeatable).",
)
_EVAL_AGENT_MEMORY_MB = typer.Option(
    None,
    "--agent-memory-mb",
    min=16,
    help="command agents: memory cap of the agent's sandbox (default: the env's own).",
)
_EVAL_PASS_ENV = typer.Option(
    [],
    "--pass-env",
    metavar="NAME",
    help="Harbor tasks: let task.toml's ${NAME} take the host's NAME (repeatable; passed "
    "to the env as pass_env). None by default: a task cannot copy host secrets.",
)


def eval_command(
    env_id: str = _EVAL_ENV_ID,
    policy: str = _EVAL_POLICY,
    tasks: Path | None = _EVAL_TASKS,
    num: int | None = _EVAL_NUM,
    seed_offset: int | None = _EVAL_SEED_OFFSET,
    env_kwargs: list[str] = _EVAL_ENV_KWARGS,
    concurrency: int = _EVAL_CONCURRENCY,
    out: Path = _EVAL_OUT,
    resume: bool = _EVAL_RESUME,
    trials: int = _EVAL_TRIALS,
    max_turns: int | None = _EVAL_MAX_TURNS,
    max_tokens: int = _EVAL_MAX_TOKENS,
    timeout: float | None = _EVAL_TIMEOUT,
    temperature: float = _EVAL_TEMPERATURE,
    seed: int | None = _EVAL_SEED,
    tokenizer: str | None = _EVAL_TOKENIZER,
    api: str = _EVAL_API,
    model: str | None = _EVAL_MODEL,
    imports: list[str] = _EVAL_IMPORTS,
    agent: str = _EVAL_AGENT,
    agent_venv: Path | None = _EVAL_AGENT_VENV,
    agent_binds: list[Path] = _EVAL_AGENT_BINDS,
    agent_memory_mb: int | None = _EVAL_AGENT_MEMORY_MB,
    pass_env: list[str] = _EVAL_PASS_ENV,
) -> None:
    """Evaluate a policy on an env: progress, summary table, results.json, trajectories.jsonl.

    Exits 1 when every episode failed for a reason outside the policy (env or agent errors).
    """
    from skyrl_sdk.agents.command_agent import CommandAgentError, parse_agent
    from skyrl_sdk.agents.evaluate import EvalError, check_resume, failure_outside_policy
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.rollout import RolloutLimits

    try:
        command_agent = parse_agent(
            agent,
            venv=str(agent_venv) if agent_venv else None,
            binds=[str(b) for b in agent_binds],
            timeout_s=timeout,
            memory_bytes=agent_memory_mb << 20 if agent_memory_mb else None,
        )
    except CommandAgentError as e:
        _die(str(e))
    setup = _EvalSetup(env_id, tasks, num, seed_offset, env_kwargs, out, resume, max_turns, trials)
    make_env, turns, the_plan = _plan_eval(setup, imports, pass_env, command_agent)
    the_policy, runner = _eval_policy(policy, tokenizer, api, model, command_agent, out)
    run_name = runner.name if runner is not None else the_policy.name
    try:
        check_resume(the_plan, env_id=env_id, policy=run_name)
    except EvalError as e:
        asyncio.run(the_policy.aclose())
        _die(str(e))
    if the_plan.kept:
        console.print(
            f"resuming: {len(the_plan.kept)} episode(s) kept, {len(the_plan.episodes)} to run"
        )
    limits = RolloutLimits(max_turns=turns, max_tokens=max_tokens, timeout=timeout)
    sampling = SamplingParams(temperature=temperature, seed=seed)
    try:
        results = asyncio.run(
            _run_with_progress(
                the_plan, env_id, make_env, the_policy, concurrency, limits, sampling, runner
            )
        )
    finally:
        if runner is not None:
            runner.close()
    _print_summary(results, env_id, run_name)
    console.print(
        f"wrote {escape(str(out / 'results.json'))} and {escape(str(out / 'trajectories.jsonl'))}"
    )
    failure = failure_outside_policy(results)
    if failure is not None:
        _die(failure, code=1)


@dataclass(frozen=True)
class _EvalSetup:
    """The `skyrl eval` options that choose the env and the episodes to run."""

    env_id: str
    """The env id or entry point, as given."""
    tasks: Path | None
    """--tasks: the user's task rows (None: the env's own)."""
    num: int | None
    """--num: the first N tasks (or seeds)."""
    seed_offset: int | None
    """--seed-offset: the first seed of an env played by seeds."""
    env_kwargs: list[str]
    """--env-kwarg KEY=VALUE strings."""
    out: Path
    """--out: the output directory."""
    resume: bool
    """--resume: run only missing or errored episodes."""
    max_turns: int | None
    """--max-turns (None: the env's limit, else the default)."""
    trials: int = 1
    """--trials: times every task is played."""


def _plan_eval(
    setup: _EvalSetup, imports: list[str], pass_env: list[str], command_agent: Any
) -> tuple[Callable[[], Any], int, Any]:
    """The env factory, the turn limit and the plan of episodes; exits 2 on a bad setting."""
    import skyrl_gym
    from skyrl_gym.registry import EntryPointError, UnknownEnvError, resolve
    from skyrl_gym.tasks import TaskError, load_tasks
    from skyrl_sdk.agents.command_agent import CommandAgentError
    from skyrl_sdk.agents.evaluate import EvalError, eval_rows, parse_env_kwargs, plan

    env_id = setup.env_id
    try:
        make_kwargs: dict[str, Any] = parse_env_kwargs(setup.env_kwargs)
        spec = resolve(env_id, imports=imports, from_cwd=True)
        if pass_env:
            make_kwargs["pass_env"] = list(pass_env)
        turns = _eval_turns(env_id, spec.max_turns, setup.max_turns, make_kwargs)

        def make_env():
            return skyrl_gym.make(spec, **make_kwargs)

        if pass_env:  # an env that takes no pass_env is refused before any episode
            _check_pass_env(env_id, make_env)
        required, env_rows = _probe_env(env_id, make_env, setup.env_kwargs, command_agent)
        if setup.tasks is not None:  # the user's rows, validated once against the env's fields
            env_rows = load_tasks(setup.tasks, required=tuple(required))
        rows = eval_rows(env_rows, env_id=env_id, num=setup.num, seed_offset=setup.seed_offset)
        the_plan = plan(rows, setup.out, resume=setup.resume, trials=setup.trials)
    except (UnknownEnvError, EntryPointError, TaskError, EvalError, CommandAgentError) as e:
        _die(str(e))
    return make_env, turns, the_plan


def _eval_turns(
    env_id: str, env_max_turns: int | None, max_turns: int | None, make_kwargs: dict[str, Any]
) -> int:
    """The episodes' turn limit; an explicit --max-turns is also passed to the env."""
    from skyrl_sdk.agents.evaluate import DEFAULT_MAX_TURNS

    if max_turns is None:
        return env_max_turns or DEFAULT_MAX_TURNS
    make_kwargs["max_turns"] = max_turns
    if env_max_turns is not None and max_turns > env_max_turns:
        # The env's registered limit is a default that `make` may raise; say so
        # rather than letting the env's guard cut episodes short unannounced.
        console.print(
            f"[yellow]warning:[/] --max-turns {max_turns} is above the turn limit of env "
            f"{escape(repr(env_id))} ({env_max_turns}); raising it to {max_turns}"
        )
    return max_turns


def _check_pass_env(env_id: str, make_env: Callable[[], Any]) -> None:
    """Exit 2 unless the env takes `pass_env` (Harbor-task envs do)."""
    try:
        make_env().close()
    except TypeError as e:
        if "pass_env" not in str(e):
            raise
        _die(f"--pass-env: env {env_id!r} takes no pass_env (Harbor-task envs do)")
    except ValueError as e:
        _die(f"--pass-env: {e}")


def _probe_env(
    env_id: str, make_env: Callable[[], Any], env_kwargs: list[str], command_agent: Any
) -> tuple[Sequence[str], list[Any]]:
    """Build one env up front (a bad --env-kwarg or setting fails here, once, not per episode):
    its required task fields and its own task rows."""
    from skyrl_sdk.agents.command_agent import host_env

    try:
        probe = make_env()
    except TypeError as e:
        if not env_kwargs:
            raise
        _die(f"--env-kwarg: env {env_id!r} does not take {', '.join(env_kwargs)} ({e})")
    except (ValueError, OSError) as e:  # the env refused its settings (a missing file)
        where = f"--env-kwarg {', '.join(env_kwargs)}: " if env_kwargs else ""
        _die(f"{where}env {env_id!r} cannot be built: {type(e).__name__}: {e}")
    try:
        if command_agent is not None:  # refuse an env that cannot host it, before any run
            host_env(probe)
        required = getattr(probe.unwrapped, "required_fields", ())
        env_rows = list(getattr(probe.unwrapped, "tasks", ()))
    finally:
        probe.close()
    return required, env_rows


def _eval_policy(
    policy: str,
    tokenizer: str | None,
    api: str,
    model: str | None,
    command_agent: Any,
    out: Path,
) -> tuple[Any, Any]:
    """The policy to evaluate and, for a command agent, its runner (None for our loop)."""
    from skyrl_sdk.agents.command_agent import CommandAgentRunner
    from skyrl_sdk.agents.policy_spec import load_error, load_policy

    if command_agent is not None and tokenizer is None and policy.startswith("scripted:"):
        tokenizer = "tiny"  # the server needs token ids, as `skyrl serve --policy scripted:`
    try:
        the_policy = load_policy(policy, tokenizer=tokenizer, api=api, model=model).policy
    except (OSError, ValueError) as e:  # PolicySpecError is a ValueError
        _die(load_error(policy, e))
    if command_agent is None:
        return the_policy, None
    if the_policy.renderer is None:
        asyncio.run(the_policy.aclose())
        _die(
            f"--agent command:... serves {policy!r} over OpenAI's API with exact token ids: "
            "it needs a tokenizer (--tokenizer DIR)"
        )
    runner = CommandAgentRunner(
        command_agent,
        the_policy,
        capture_dir=out / "capture",
        log_dir=out / "agent_logs",
    )
    return the_policy, runner


async def _run_with_progress(
    the_plan, env_id, make_env, policy, concurrency, limits, sampling, agent=None
):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from skyrl_sdk.agents.evaluate import run_plan

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]:.3f}"),
        TimeElapsedColumn(),
    )
    total_reward = sum(t.reward for t in the_plan.kept)
    finished = len(the_plan.kept)
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(
            f"eval {env_id}",
            total=the_plan.total,
            completed=finished,
            reward=total_reward / finished if finished else 0.0,
        )

        def on_done(trajectory) -> None:
            nonlocal total_reward, finished
            total_reward += trajectory.reward
            finished += 1
            progress.update(bar, advance=1, reward=total_reward / finished)

        try:
            return await run_plan(
                the_plan,
                make_env,
                policy,
                env_id=env_id,
                concurrency=concurrency,
                limits=limits,
                sampling=sampling,
                on_done=on_done,
                agent=agent,
            )
        finally:
            await policy.aclose()


def _print_summary(results, env_id: str, policy_name: str) -> None:
    from skyrl_sdk.agents.evaluate import run_stats, summarize

    s = summarize(results)
    table = Table(title=f"skyrl eval {escape(env_id)}  ({escape(policy_name)})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("episodes", str(s.episodes))
    table.add_row("mean reward", f"{s.mean_reward:.3f}")
    table.add_row("success rate", f"{s.success_rate:.1%}")
    table.add_row("mean turns", f"{s.mean_turns:.2f}")
    table.add_row("stop reasons", ", ".join(f"{k} {v}" for k, v in s.stop_reasons.items()))
    table.add_row("parse error rate", f"{s.parse_error_rate:.1%}")
    table.add_row("generated tokens", str(s.generated_tokens))
    table.add_row("mean episode time", f"{s.mean_duration_s:.2f} s")
    table.add_row("trainable episodes", f"{s.trainable} / {s.episodes}")
    if s.errored:
        table.add_row("[red]errored[/]", f"{s.errored} (rerun with --resume)")
    stats = run_stats(results) if results else None
    for label, value in stats.lines() if stats else ():
        table.add_row(escape(label), escape(value))
    console.print(table)
    if stats is not None and stats.note:
        console.print(f"note: {escape(stats.note)}")


def view_command(
    trajectories: Path = typer.Argument(
        ...,
        help="A trajectories.jsonl file, or a directory of them (e.g. `skyrl serve --capture`).",
    ),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="HTML file to write."),
    tokenizer: str | None = typer.Option(
        None, help="Tokenizer dir (or 'tiny') to show each token's text; ids otherwise."
    ),
    limit: int | None = typer.Option(None, help="Render at most this many episodes."),
) -> None:
    """Render trajectories as a static HTML page (messages, tokens, mask, logprobs, rewards)."""
    from skyrl_sdk.agents.evaluate import EvalError, read_trajectory_file
    from skyrl_sdk.agents.viewer import render_html

    if trajectories.is_dir():
        files = sorted(trajectories.glob("*.jsonl"))
        if not files:
            _die(f"no .jsonl files in {trajectories}")
    elif trajectories.is_file():
        files = [trajectories]
    else:
        _die(f"no such file: {trajectories}")
    try:
        items = [t for f in files for t in read_trajectory_file(f)]
    except EvalError as e:
        _die(str(e))
    if limit is not None:
        items = items[:limit]
    decode = None
    if tokenizer is not None:
        from skyrl_sdk.agents.policy_spec import PolicySpecError, load_renderer

        try:
            renderer = load_renderer(tokenizer)
        except PolicySpecError as e:
            _die(str(e))
        assert renderer is not None
        decode = renderer.decode
    output.write_text(render_html(items, decode=decode, title=trajectories.name), encoding="utf-8")
    console.print(f"wrote {escape(str(output))} ({len(items)} episodes)")


# `skyrl serve`'s options (kept out of the signature so that it stays readable).
_SERVE_POLICY = typer.Option(
    None,
    "--policy",
    "-p",
    help="Policy SPEC: tiny, a model DIR, scripted:FILE, or an upstream OpenAI-compatible "
    "URL to proxy (default: tiny).",
)
_SERVE_MODEL = typer.Option(
    None, "--model", "-m", help="Same as --policy (kept for older scripts)."
)
_SERVE_TOKENIZER = typer.Option(
    None,
    help="Tokenizer dir (or 'tiny') for scripted:FILE and URL policies; with a URL it makes "
    "the proxy token-exact (requests go upstream as token ids).",
)
_SERVE_UPSTREAM_MODEL = typer.Option(
    None, help="For URLs: the upstream's model name (default: its first model)."
)
_SERVE_HOST = typer.Option(
    "127.0.0.1", help="Interface to bind; any non-loopback address needs --api-key."
)
_SERVE_PORT = typer.Option(8000, help="TCP port.")
_SERVE_NAME = typer.Option(
    None,
    help="Model name clients use (default: 'tiny', the dir name, 'scripted', or for a "
    "URL the --upstream-model, else 'default').",
)
_SERVE_CAPTURE = typer.Option(
    None,
    "--capture",
    help="Write each session's token-exact trajectory to DIR/<session>.jsonl, updated "
    "after every answered turn (sessions: /sessions/{id}/v1 base URLs or the 'user' field).",
)
_SERVE_TOOL_FORMAT = typer.Option(
    "auto", help="How tool calls are read from replies: auto, hermes, mistral, llama3."
)
_SERVE_MAX_BATCH_SIZE = typer.Option(16, help="Requests decoded together.")
_SERVE_DEVICE = typer.Option("cpu", help="torch device.")
_SERVE_API_KEY = typer.Option(
    None,
    "--api-key",
    envvar=API_KEY_ENV,
    show_default=False,
    help="Require this key on every request but GET /health, as 'Authorization: Bearer "
    "KEY' (the openai SDK's api_key); others get 401. Required to bind a non-loopback host.",
)
_SERVE_MAX_REQUEST_BYTES = typer.Option(
    DEFAULT_MAX_REQUEST_BYTES,
    "--max-request-bytes",
    envvar="SKYRL_MAX_REQUEST_BYTES",
    min=1,
    help="Larger request bodies get 413 without being read (default 32 MiB).",
)
_SERVE_SESSION_TOKEN_BUDGET = typer.Option(
    200_000,
    "--session-token-budget",
    min=0,
    help="Tokens (prompt + generated) a session key opens; past it, 429 (0: no budget).",
)
_SERVE_MAX_STORED_RESPONSES = typer.Option(
    4096,
    "--max-stored-responses",
    min=1,
    help="Responses kept for previous_response_id and GET/DELETE /v1/responses/{id} "
    "(least recently used evicted first).",
)
_SERVE_SESSION_MAX_ROWS = typer.Option(
    0,
    "--session-max-rows",
    min=0,
    help="Most rows of the batch one session holds, n's choices included "
    "(0: half of --max-batch-size).",
)
_SERVE_SESSION_MAX_QUEUED = typer.Option(
    64,
    "--session-max-queued",
    min=1,
    help="Most requests one session may have waiting; more get 429.",
)
_SERVE_HEADER_TIMEOUT = typer.Option(
    10.0,
    "--header-timeout",
    min=0.1,
    help="Seconds a connection has to send a whole request head, else it is closed.",
)
_SERVE_QUIET = typer.Option(
    False, "--quiet", "-q", help="Do not log one line per request to stderr."
)


def serve_command(
    policy: str | None = _SERVE_POLICY,
    model: str | None = _SERVE_MODEL,
    tokenizer: str | None = _SERVE_TOKENIZER,
    upstream_model: str | None = _SERVE_UPSTREAM_MODEL,
    host: str = _SERVE_HOST,
    port: int = _SERVE_PORT,
    name: str | None = _SERVE_NAME,
    capture: Path | None = _SERVE_CAPTURE,
    tool_format: str = _SERVE_TOOL_FORMAT,
    max_batch_size: int = _SERVE_MAX_BATCH_SIZE,
    device: str = _SERVE_DEVICE,
    api_key: str | None = _SERVE_API_KEY,
    max_request_bytes: int = _SERVE_MAX_REQUEST_BYTES,
    session_token_budget: int = _SERVE_SESSION_TOKEN_BUDGET,
    session_max_rows: int = _SERVE_SESSION_MAX_ROWS,
    session_max_queued: int = _SERVE_SESSION_MAX_QUEUED,
    header_timeout: float = _SERVE_HEADER_TIMEOUT,
    quiet: bool = _SERVE_QUIET,
    max_stored_responses: int = _SERVE_MAX_STORED_RESPONSES,
) -> None:
    """Serve a policy over an OpenAI-compatible HTTP API (chat and completions, streaming,
    tools, token ids), optionally capturing every session token-exact for training."""
    from skyrl_sdk.http_guard import InsecureBindError, check_bind

    if policy is not None and model is not None and policy != model:
        _die("give --policy or --model (its old name), not both")
    spec = policy or model or "tiny"
    try:
        check_bind(host, api_key)  # before the model loads: refuse at once
    except InsecureBindError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        from skyrl_sdk.agents.serving import ServeConfig, ToolOutputFormat
    except ImportError as e:
        _die(str(e))
    from skyrl_sdk.agents.policy_spec import PolicyUse, load_error, load_policy

    try:
        fmt = ToolOutputFormat(tool_format)
    except ValueError:
        _die(f"--tool-format {tool_format!r}: use auto, hermes, mistral or llama3")
    from skyrl_sdk.agents.engine.fairness import FairnessLimits

    fairness = FairnessLimits(
        max_rows=session_max_rows or max(1, max_batch_size // 2), max_queued=session_max_queued
    )
    try:
        loaded = load_policy(
            spec,
            tokenizer=tokenizer,
            device=device,
            max_batch_size=max_batch_size,
            model=upstream_model,
            fairness=fairness,
            use=PolicyUse.SERVE,
        )
    except (OSError, ValueError) as e:  # PolicySpecError is a ValueError
        _die(load_error(spec, e))
    config = ServeConfig(
        host=host,
        port=port,
        api_key=api_key,
        max_request_bytes=max_request_bytes,
        capture_dir=capture,
        model_name=name or loaded.model_name,
        tool_format=fmt,
        session_token_budget=session_token_budget or None,
        header_timeout_s=header_timeout,
        log_requests=not quiet,
        max_stored_responses=max_stored_responses,
    )
    _run_server(loaded, config)


def _run_server(loaded: LoadedPolicy, config: ServeConfig) -> None:
    """Serve the loaded policy with `config` until interrupted."""
    import uvicorn

    from skyrl_sdk.agents.serving import create_app
    from skyrl_sdk.agents.serving.runner import uvicorn_settings

    host, port, capture = config.host, config.port, config.capture_dir
    app = create_app(loaded.policy, config, renderer=loaded.renderer)
    auth = "API key required" if config.api_key else "no API key"
    where = f", capturing to {capture}" if capture else ""
    console.print(
        f"serving {escape(loaded.policy.name)} as {config.model_name!r} on "
        f"http://{host}:{port}/v1 ({auth}{escape(where)})"
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", **uvicorn_settings(config))
