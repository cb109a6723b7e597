"""Oracle demonstrations of generated terminal tasks, token-exact (`skyrl terminal demos`).

For each generated task (`skyrl_gym.envs.terminal_gen`), its reference solution
(`solution/solve.sh`, the body after the `#!/bin/bash`, `set -e` and `cd /app` header) is
played through the env as the assistant's tool calls, written in the env's own tool-call
format (`tool_format.render_call`): a `ScriptedPolicy` with the model's `ChatRenderer` plays
it through the ordinary rollout (`run_episodes`), so the prompt is the env's real prompt
rendered by the model's chat template, the reply is the canonical tokenization of the call
plus the end-of-turn token (what the policy would sample to write it), and the observations
are the env's real ones. The env's verifier grades each episode; only reward-1 episodes are
kept, written as `Trajectory` JSONL that `skyrl sft` trains on exactly.

Two styles (`DemoStyle`): `one-reply` (`<bash>CMD</bash><answer>done</answer>`, the shape of
the terminal demo's worked examples) and `observe` (`<bash>CMD</bash>`, the env's
observation, then `<answer>done</answer>`; two turns).
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import skyrl_gym
from skyrl_gym.envs.terminal_gen.env import task_rows
from skyrl_gym.envs.terminal_gen.families import make_spec
from skyrl_gym.envs.terminal_gen.verifier import render_solve_sh
from skyrl_gym.tasks import TaskRow
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import SamplingParams
from skyrl_sdk.agents.rollout import RolloutLimits, run_episodes
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import Trajectory, TrajectoryWriter
from skyrl_sdk.tools.calls import ToolCall

DEFAULT_ENV = "terminal-gen-demo"
"""The env the demonstrations are played in: the terminal demo's (same prompt as its RL and
held-out episodes, so SFT trains on the prompts the policy later sees)."""
HEADER_LINES = frozenset({"#!/bin/bash", "set -e", "cd /app"})
"""solve.sh's header lines (`verifier.render_solve_sh`): the env's shell already starts in
/app, and a one-call demonstration has no later command for `set -e` to stop."""


class DemoStyle(enum.Enum):
    """How a solution is written as assistant turns."""

    ONE_REPLY = "one-reply"
    """One turn: the command, then the answer in the same reply."""
    OBSERVE = "observe"
    """Two turns: the command; after its observation, the answer."""


@dataclass(frozen=True)
class DemoSettings:
    """Which demonstrations to write."""

    split: str = "train"
    """`train` or `heldout` (`terminal_gen.generate.SPLITS`)."""
    n: int = 64
    """Tasks played (families in turn)."""
    families: tuple[str, ...] | None = None
    """Family names (None: all)."""
    env_id: str = DEFAULT_ENV
    """The env (a `terminal-gen` variant taking `split`, `families`, `per_family`)."""
    style: DemoStyle = DemoStyle.ONE_REPLY
    """How a solution becomes assistant turns."""
    max_tokens: int = 512
    """Tokens per assistant turn (a longer reply is cut, so its episode fails and is dropped)."""
    concurrency: int = 4
    """Episodes at once (each runs its commands and verifier in a sandbox)."""
    tasks_dir: Path | None = None
    """Harbor task folders (`skyrl terminal gen`) whose `solution/solve.sh` is played (None:
    each task's generated solve.sh); the env grades its own copy of the task."""


@dataclass(frozen=True)
class DemoReport:
    """What `write_demonstrations` did."""

    path: Path
    """The JSONL file written."""
    kept: int
    """Episodes the verifier gave reward 1 (written)."""
    dropped: tuple[str, ...]
    """Task ids whose demonstration did not score 1 (not written)."""
    per_family: Mapping[str, int] = field(default_factory=dict)
    """Kept demonstrations per family."""


def solution_command(solve_sh: str) -> str:
    """The command a solve.sh runs, without its header lines."""
    lines = [line for line in solve_sh.strip().splitlines() if line.strip() not in HEADER_LINES]
    return "\n".join(lines).strip()


def demo_tasks(settings: DemoSettings) -> list[TaskRow]:
    """The first `n` tasks of the split, families in turn."""
    names = list(settings.families) if settings.families else None
    per_family = -(-settings.n // len(names or _all_families()))
    return task_rows(settings.split, names, per_family)[: settings.n]


def _all_families() -> list[str]:
    from skyrl_gym.envs.terminal_gen.families import FAMILIES

    return list(FAMILIES)


def solve_sh_for(task: TaskRow, tasks_dir: Path | None) -> str:
    """The task's solve.sh: from `tasks_dir/<task_id>/solution/solve.sh`, or generated."""
    if tasks_dir is not None:
        return (tasks_dir / str(task["task_id"]) / "solution" / "solve.sh").read_text()
    return render_solve_sh(make_spec(str(task["family"]), int(task["seed"])))


def demo_actions(
    command: str, style: DemoStyle, render_call: Callable[[ToolCall], str]
) -> list[str]:
    """The assistant turns that run `command` and then finish, in the env's call format."""
    bash = render_call(ToolCall("bash", {"command": command}))
    done = render_call(ToolCall("answer", {"answer": "done"}))
    return [bash + done] if style is DemoStyle.ONE_REPLY else [bash, done]


def _render_call(env_id: str) -> Callable[[ToolCall], str]:
    """The env's own `render_call` (its tool format is fixed when its tools are made, at
    reset, so one probe episode is reset and closed)."""
    env = skyrl_gym.make(env_id, split="train", families=["echo-word"], per_family=1)
    try:
        env.reset()
        return env.unwrapped.tool_format.render_call
    finally:
        env.close()


def play_demonstrations(settings: DemoSettings, renderer: ChatRenderer) -> list[Trajectory]:
    """Every task's demonstration episode, graded by the env (kept or not), in task order
    (runs its own event loop)."""
    if settings.env_id == DEFAULT_ENV:
        import skyrl_sdk.trainer.demos.terminal  # noqa: F401  (registers the demo's env)

    tasks = demo_tasks(settings)
    render_call = _render_call(settings.env_id)
    script = {
        str(t["task_id"]): demo_actions(
            solution_command(solve_sh_for(t, settings.tasks_dir)), settings.style, render_call
        )
        for t in tasks
    }
    turns = 1 if settings.style is DemoStyle.ONE_REPLY else 2
    names = sorted({str(t["family"]) for t in tasks})
    per_family = -(-len(tasks) // max(1, len(names)))
    kwargs: dict[str, Any] = {"split": settings.split, "families": names, "per_family": per_family}
    episodes = run_episodes(
        lambda: skyrl_gym.make(settings.env_id, max_turns=turns, **kwargs),
        ScriptedPolicy(script, renderer=renderer, name="oracle"),
        [(f"demo/{t['task_id']}", t) for t in tasks],
        concurrency=settings.concurrency,
        limits=RolloutLimits(max_turns=turns, max_tokens=settings.max_tokens),
        sampling=SamplingParams(max_tokens=settings.max_tokens, temperature=1.0),
        env_id=settings.env_id,
    )
    return asyncio.run(episodes)


def write_demonstrations(
    settings: DemoSettings, renderer: ChatRenderer, out: str | Path
) -> DemoReport:
    """Play the demonstrations and write those with reward 1 to `out` (Trajectory JSONL)."""
    trajectories = play_demonstrations(settings, renderer)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    kept = [t for t in trajectories if t.reward == 1.0]
    with TrajectoryWriter(path) as writer:
        for trajectory in kept:
            writer.write(trajectory)
    dropped = tuple(t.task_id for t in trajectories if t.reward != 1.0)
    families = Counter(str(t.task_id).rsplit("-s", 1)[0] for t in kept)
    return DemoReport(path, len(kept), dropped, dict(sorted(families.items())))


def model_renderer(source: str, path: str | None = None) -> ChatRenderer:
    """The chat renderer of a `model.source` (`tiny`, `smollm2`, `pretrained` with `path`)."""
    from transformers import AutoTokenizer

    from skyrl_sdk.trainer.config import ModelConfig, ModelSource
    from skyrl_sdk.trainer.models import lookup_tokenizer

    cfg = ModelConfig(source=ModelSource(source), path=path)
    if cfg.source is ModelSource.LOOKUP_TINY:
        return ChatRenderer(lookup_tokenizer())
    if cfg.source is ModelSource.TINY:
        from skyrl_sdk.agents.tiny import tiny_model_dir

        directory = tiny_model_dir(hidden_size=cfg.hidden_size, seed=0)
    elif cfg.source is ModelSource.SMOLLM2:
        from skyrl_sdk.trainer.models import smollm2_dir

        directory = smollm2_dir()
    else:
        if cfg.path is None:
            raise ValueError("model source 'pretrained' needs a path")
        directory = Path(cfg.path)
    return ChatRenderer(AutoTokenizer.from_pretrained(directory))


def demos_command(
    out: Path,
    split: str = "train",
    n: int = 64,
    families: str | None = None,
    model: str = "smollm2",
    model_path: str | None = None,
    env_id: str = DEFAULT_ENV,
    style: str = DemoStyle.ONE_REPLY.value,
    tasks_dir: Path | None = None,
    max_tokens: int = 512,
    concurrency: int = 4,
) -> DemoReport:
    """`skyrl terminal demos`: write oracle demonstrations for `model`'s tokenizer."""
    from skyrl_gym.envs.terminal_gen.generate import resolve_families

    settings = DemoSettings(
        split=split,
        n=n,
        families=tuple(resolve_families(families)) if families else None,
        env_id=env_id,
        style=DemoStyle(style),
        max_tokens=max_tokens,
        concurrency=concurrency,
        tasks_dir=tasks_dir,
    )
    return write_demonstrations(settings, model_renderer(model, model_path), out)


def terminal_app() -> Any:
    """`skyrl_gym`'s `skyrl terminal` group with `demos` added (the `demos` command needs
    the agents and a tokenizer, which `skyrl_gym` may not import)."""
    import typer
    from rich.console import Console

    from skyrl_gym.envs.terminal_gen.cli import app

    console = Console()

    @app.command("demos")
    def _demos(
        out: Path = typer.Option(..., "--out", "-o", help="Trajectory JSONL file to write."),
        split: str = typer.Option("train", "--split", help="train or heldout."),
        n: int = typer.Option(64, "--n", help="Tasks played (families in turn)."),
        families: str | None = typer.Option(
            None, "--families", help="Comma-separated family names (default: all)."
        ),
        model: str = typer.Option(
            "smollm2", "--model", help="model.source whose tokenizer renders: smollm2, tiny, ..."
        ),
        model_path: str | None = typer.Option(None, "--model-path", help="For `pretrained`."),
        env_id: str = typer.Option(DEFAULT_ENV, "--env", help="The terminal-gen env to play."),
        style: str = typer.Option("one-reply", "--style", help="one-reply or observe."),
        tasks_dir: Path | None = typer.Option(
            None, "--tasks", help="Task folders (skyrl terminal gen) whose solve.sh is played."
        ),
        max_tokens: int = typer.Option(512, "--max-tokens", help="Tokens per assistant turn."),
        concurrency: int = typer.Option(4, "--concurrency", "-j", help="Episodes at once."),
    ) -> None:
        """Play each task's solution/solve.sh through the env as the assistant's tool calls,
        token-exact for the model's tokenizer; write the reward-1 episodes (for skyrl sft)."""
        try:
            report = demos_command(
                out, split, n, families, model, model_path, env_id, style, tasks_dir,
                max_tokens, concurrency,
            )  # fmt: skip
        except ValueError as e:
            console.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2) from None
        console.print(
            f"wrote {report.kept} demonstration(s) to {report.path} "
            f"({', '.join(f'{k} {v}' for k, v in report.per_family.items()) or 'none'}); "
            f"dropped {len(report.dropped)} that did not score 1"
            + (f": {', '.join(report.dropped[:10])}" if report.dropped else "")
        )

    return app


app = terminal_app()
"""The `skyrl terminal` group with `demos` (pyproject's `terminal` entry point should name
this)."""
