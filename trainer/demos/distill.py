"""`skyrl demo --task distill --teacher DIR`: distil a finished terminal run into a fresh student.

The teacher is the terminal pipeline's RL run (`DIR/rl`, or a run directory given directly):
SmolLM2 + LoRA after demonstrations, SFT and GRPO. The student is the same model, fresh (no
`model.init_from`), trained by on-policy distillation (`algorithm.advantage: opd`,
`trainer.opd`): it samples its own episodes on the teacher's `train`-split tasks and every
sampled token's advantage is the teacher's logprob minus the sampler's (plus, with
`opd_reward_coef`, a share of GRPO's task-reward advantage), and the logit term
(`DistillSettings.logit_kl_coef`) matches its next-token distribution to the teacher's top
tokens at every position it sampled. When the teacher is a pipeline's (`demos.jsonl` and `sft/`
beside `rl/`), the student is first warm-started off-policy on those demonstrations with the
teacher's top tokens as targets (`skyrl sft` with `sft.teacher`, `DistillSettings.warm_start`),
so OPD starts where the student samples what the teacher would grade. The baseline is GRPO
from the same fresh start with the teacher run's own RL settings, run until its sampled tokens reach the
student's (in chunks, resuming its checkpoint, so it stops within one step of the student's).

All three are judged on the teacher run's held-out episodes (its `heldout` env kwargs,
episodes and temperature; with the teacher's seed the same sampling seeds, so the comparisons
are paired task by task): the teacher by its run's last evaluation, the student by its loop's
evaluations before (= the fresh model; the pipeline's base evaluation when the teacher's
pipeline left one for these episodes) and after training, the baseline by its final
checkpoint. `results.json` has each one's success overall and per family with 95% Wilson
intervals, `student_vs_teacher` (the ratio of the student's success to the teacher's), the
sampled tokens of each run and the success (and gain over the fresh model) per 1k sampled
tokens, and each phase's seconds; `report.md` the same as tables.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_sdk.trainer.demos import terminal  # registers the demo env
from skyrl_sdk.trainer.demos.terminal_pipeline import evaluate_base, evaluation_json, phase_times

if TYPE_CHECKING:
    from skyrl_sdk.trainer.config import TrainConfig
    from skyrl_sdk.trainer.heldout import HeldoutResult

DEFAULT_OUT = "runs/demo-distill"
"""Where `skyrl demo --task distill` writes when `--out` is not given."""
RUN_DIRS = ("student-kd", "base-eval", "student", "rl-baseline", "rl-baseline-eval", "teacher-eval")
"""The demo's run directories under its output (a run appends to the files it finds, so the
demo starts only where none exists: it never deletes an earlier run)."""
TOKENS_METRIC = "tokens/generated"
"""The loop's per-step count of sampled completion tokens (`trainer.batch.step_metrics`)."""


class OutputInUseError(ValueError):
    """`--out` already holds a run of this demo (the message is one line)."""


def check_out(out_dir: str | Path) -> None:
    """Refuse an output folder that already holds one of the demo's runs (`OutputInUseError`):
    its files would be appended to, and deleting them would lose a finished run."""
    used = [name for name in RUN_DIRS if (Path(out_dir) / name).exists()]
    if used:
        raise OutputInUseError(
            f"--out {out_dir} already holds an earlier run ({', '.join(used)}): choose another "
            "folder or remove it"
        )


class TeacherRunError(ValueError):
    """`--teacher` names no finished terminal run (the message is one line)."""


@dataclass(frozen=True)
class DistillSettings:
    """Sizes and step counts of the student and of the RL baseline."""

    steps: int = 12
    """Distillation steps of the student."""
    lr: float | None = terminal.PRESET["optim"]["lr"]
    """Student and baseline learning rate: the terminal demo's from a fresh model (None: the
    teacher run's, tuned for RL from an SFT checkpoint)."""
    opd_reward_coef: float = 0.0
    """Weight of GRPO's task-reward advantage in the student's (0: pure distillation)."""
    logit_kl_coef: float = 1.0
    """Weight of the logit term (`algorithm.opd_logit_kl_coef`: KL from the teacher's top
    tokens to the student's distribution at every sampled position). With the sampled-token
    advantage alone (0), 12 steps from the fresh model learnt only `echo-word`, the one
    family it already solved sometimes: 10.4% held-out against the teacher's 56.8% (seed 3)."""
    top_k: int = 32
    """The teacher's most likely tokens the logit term keeps per position."""
    warm_start: bool = True
    """Before OPD, distil the teacher on the demonstrations its pipeline trained SFT on
    (`skyrl sft` with `sft.teacher`: the teacher's top tokens at every demonstrated position,
    with its SFT run's steps, batch and learning rate; off-policy, no tokens sampled), when
    the teacher is a pipeline's (`demos.jsonl` and `sft/` beside `rl/`). From the fresh model
    OPD alone (12 steps, logit term on) learnt only `echo-word`: 11.1% held-out against the
    teacher's 56.8% (seed 3), its replies the right command with the wrong arguments."""
    label_weight: float = 1.0
    """Warm start: weight of the demonstrations' own tokens' NLL beside the teacher's KL
    (`sft.label_weight`). With 0 (the teacher's targets alone) the student reached 42.4%
    after OPD (seed 3), below the 50.6% that the teacher's own SFT on the same
    demonstrations reached."""
    max_rl_steps: int = 48
    """The baseline stops here even when its sampled tokens are still below the student's."""
    max_rl_chunks: int = 6
    """Resumed runs the baseline may take to reach the student's sampled tokens."""


@dataclass(frozen=True)
class TeacherRun:
    """A finished terminal run, as `--teacher` named it."""

    run_dir: Path
    """The run whose final checkpoint teaches (the pipeline's `rl/`)."""
    config: TrainConfig
    """Its config (`config.yaml`): env, held-out and rollout settings the student reuses."""
    results: Mapping[str, object]
    """The pipeline's `results.json` beside it (empty when there is none)."""


def find_teacher(path: str | Path) -> TeacherRun:
    """The teacher run `path` names: a terminal pipeline's output (`results.json` and `rl/`)
    or a run directory (`config.yaml` and `checkpoints/`); `TeacherRunError` otherwise."""
    from skyrl_sdk.trainer.checkpoint import CONFIG_FILE, Checkpointer
    from skyrl_sdk.trainer.config import ConfigError, load_config

    given = Path(path).expanduser()
    if not given.is_dir():
        raise TeacherRunError(f"--teacher {path}: no such directory")
    run = given / "rl" if (given / "rl").is_dir() else given
    if not (run / CONFIG_FILE).is_file():
        raise TeacherRunError(
            f"--teacher {path}: not a finished terminal run (no {CONFIG_FILE} in {run}; give "
            "the `skyrl demo --task terminal` output or its rl/ run directory)"
        )
    if Checkpointer(run).latest() is None:
        raise TeacherRunError(f"--teacher {path}: the run {run} has no checkpoint to teach with")
    try:
        config = load_config(run / CONFIG_FILE)
    except ConfigError as e:
        raise TeacherRunError(f"--teacher {path}: cannot read {run / CONFIG_FILE}: {e}") from None
    if config.heldout.env_kwargs is None:
        raise TeacherRunError(f"--teacher {path}: the run {run} has no held-out evaluation")
    results_file = run.parent / "results.json" if run != given else given / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    return TeacherRun(run, config, results)


def _run_config(teacher: TeacherRun, out: Path, seed: int, updates: Mapping[str, Any]) -> Any:
    """The teacher run's config for a fresh model (no `init_from`) in `out`, with `updates`."""
    from skyrl_sdk.trainer.config import build_config, merge

    data = teacher.config.model_dump(mode="json")
    data["model"]["init_from"] = None
    data.update(out_dir=str(out), seed=seed)
    data["heldout"]["every_steps"] = 0
    data["logging"]["trajectories"] = True  # the sampled tokens are counted from them
    return build_config(merge(data, dict(updates)))


def _sampled_tokens(run_dir: Path) -> list[int]:
    """The run's sampled completion tokens per step (`metrics.jsonl`, in step order)."""
    from skyrl_sdk.trainer.metrics import read_metrics

    rows = sorted(read_metrics(run_dir / "metrics.jsonl"), key=lambda r: r["step"])
    return [int(r[TOKENS_METRIC]) for r in rows]


def _episode_tokens(run_dir: Path) -> int:
    """Completion tokens of every training episode the run sampled (`trajectories.jsonl`):
    the trained batches' and also groups dynamic sampling set aside or a step never took."""
    from skyrl_sdk.agents.trajectory import read_trajectories

    return sum(t.num_generated_tokens for t in read_trajectories(run_dir / "trajectories.jsonl"))


def _train(cfg: TrainConfig, console: Any, *, resume: bool = False) -> None:
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer

    AsyncTrainer(cfg, resume=resume, console=console).run()


def _rl_baseline(
    teacher: TeacherRun,
    out: Path,
    seed: int,
    target: int,
    s: DistillSettings,
    overrides: Mapping[str, Any],
    console: Any,
) -> tuple[Path, list[int], int]:
    """GRPO from the fresh start until its sampled tokens (`_episode_tokens`) reach
    `target`: chunks of steps (resuming its checkpoint), each sized so that at the largest
    per-step count seen so far it cannot pass `target` before its last step. A step samples
    more than it trains when dynamic sampling sets groups aside (from a fresh model most
    groups fail alike): then the first chunk is one step, and a step counts as its run's
    average of every sampled token. Its run directory, trained batches' tokens per step and
    chunks run."""
    from skyrl_sdk.trainer.config import merge

    run = out / "rl-baseline"
    # GRPO whatever the teacher run's own algorithm was (a teacher may itself be distilled).
    grpo = {"advantage": "grpo", "teacher": None, "opd_reward_coef": 0.0, "opd_logit_kl_coef": 0}
    updates: dict[str, Any] = merge(
        dict(overrides), {"heldout": {"env_kwargs": None}, "algorithm": grpo}
    )
    if s.lr is not None:
        updates["optim"] = {"lr": s.lr}
    per_step: list[int] = []
    steps, chunks, sampled = 0, 0, 0
    sets_aside = _run_config(teacher, run, seed, updates).algorithm.dynamic_sampling
    while sampled < target and steps < s.max_rl_steps and chunks < s.max_rl_chunks:
        if per_step:
            per = max(max(per_step), -(-sampled // steps))  # all sampled, on average
            more = (target - sampled) // per
        else:  # half the student's steps (the same start samples alike at first)
            more = 1 if sets_aside else s.steps // 2
        more = max(1, more)
        steps = min(s.max_rl_steps, steps + more)
        cfg = _run_config(teacher, run, seed, {**updates, "trainer": {"steps": steps}})
        _train(cfg, console, resume=chunks > 0)
        chunks += 1
        per_step, sampled = _sampled_tokens(run), _episode_tokens(run)
    return run, per_step, chunks


def _evaluate_checkpoint(teacher: TeacherRun, run: Path, out: Path, seed: int) -> HeldoutResult:
    """The final checkpoint of `run` (trained from the fresh model) on the held-out episodes."""
    cfg = _run_config(teacher, out, seed, {"model": {"init_from": str(run)}})
    return evaluate_base(cfg)


def _warm_start(
    teacher: TeacherRun,
    out: Path,
    seed: int,
    label_weight: float,
    overrides: Mapping[str, Any],
    console: Any,
) -> dict[str, Any] | None:
    """Distil the teacher on its pipeline's demonstrations into the fresh model
    (`DistillSettings.warm_start`) in `out`; what was run (None: the teacher has no pipeline
    beside it)."""
    from skyrl_sdk.trainer.config import build_config, load_config, merge
    from skyrl_sdk.trainer.metrics import read_metrics
    from skyrl_sdk.trainer.sft import train_sft

    pipeline = teacher.run_dir.parent
    demos, sft_config = pipeline / "demos.jsonl", pipeline / "sft" / "config.yaml"
    if not (demos.is_file() and sft_config.is_file()):
        return None
    data = load_config(sft_config).model_dump(mode="json")
    data.update(out_dir=str(out), seed=seed)
    data["model"]["init_from"] = None
    data["sft"].update(data=str(demos), teacher=str(teacher.run_dir), label_weight=label_weight)
    result = train_sft(build_config(merge(data, dict(overrides))), console=console)
    kl = [float(r["sft/logit_kl"]) for r in read_metrics(out / "metrics.jsonl")]
    return {
        "run": str(out),
        "data": str(demos),
        "label_weight": label_weight,
        "steps": result.steps,
        "logit_kl_first_last": [kl[0], kl[-1]] if kl else None,
        "heldout_nll_start_end": [result.heldout_nll_start, result.heldout_nll_end],
    }


def _teacher_evaluation(teacher: TeacherRun, out: Path, seed: int) -> tuple[HeldoutResult, str]:
    """The teacher's held-out result: its run's last evaluation when it played the same
    episodes (same seed and episode count), else its checkpoint evaluated here."""
    from skyrl_sdk.trainer.heldout import read_results

    recorded = read_results(teacher.run_dir)
    if recorded and teacher.config.seed == seed:
        return recorded[-1], f"{teacher.run_dir}/heldout.jsonl (its last evaluation)"
    if seed != teacher.config.seed and teacher.config.model.source.value in ("tiny", "lookup-tiny"):
        # The seed builds these models: another one would evaluate another teacher.
        raise TeacherRunError(
            f"--teacher {teacher.run_dir}: a {teacher.config.model.source.value} teacher is "
            f"evaluated at its own seed ({teacher.config.seed}), not {seed}"
        )
    cfg = teacher.config.model_dump(mode="json")
    cfg.update(out_dir=str(out / "teacher-eval"), seed=seed)
    cfg["model"]["init_from"] = str(teacher.run_dir)
    cfg["model"]["lora"]["enabled"] = False  # the checkpoint's adapters come merged
    from skyrl_sdk.trainer.config import build_config

    return evaluate_base(build_config(cfg)), f"{out / 'teacher-eval'} (re-evaluated)"


def _fresh_evaluation(
    teacher: TeacherRun, teacher_eval: HeldoutResult, seed: int
) -> tuple[HeldoutResult, str] | None:
    """The fresh model's held-out result when the teacher's pipeline evaluated it already
    (`base/heldout.jsonl` beside `rl/`) on the episodes the student plays: the teacher's
    seed, and the episode count, temperature and tasks of the teacher's evaluation. The
    student starts from that model (LoRA adds nothing before its first step), so the demo does
    not play the slowest evaluation (the untrained model rambles to its token limit) twice."""
    from skyrl_sdk.trainer.heldout import read_results

    base_dir = teacher.run_dir.parent / "base"
    recorded = read_results(base_dir)
    if seed != teacher.config.seed or len(recorded) != 1:
        return None
    base = recorded[0]
    same = (
        base.step == 0
        and base.episodes == teacher_eval.episodes
        and base.temperature == teacher_eval.temperature
        and base.per_task.keys() == teacher_eval.per_task.keys()
    )
    return (base, f"{base_dir}/heldout.jsonl (the pipeline's base evaluation)") if same else None


def _student(
    teacher: TeacherRun,
    teacher_eval: HeldoutResult,
    out: Path,
    seed: int,
    s: DistillSettings,
    overrides: Mapping[str, Any],
    console: Any,
    phases: dict[str, float],
) -> tuple[HeldoutResult, HeldoutResult, str, dict[str, Any] | None]:
    """The student's training (the warm start, then OPD) with its phase times in `phases`:
    its final evaluation, the fresh model's with where it comes from, and the warm start's
    record (None: not run)."""
    from skyrl_sdk.trainer.config import merge
    from skyrl_sdk.trainer.heldout import read_results

    t0 = time.perf_counter()
    algorithm = {
        "advantage": "opd",
        "teacher": str(teacher.run_dir),
        "opd_reward_coef": s.opd_reward_coef,
        "opd_logit_kl_coef": s.logit_kl_coef,
        "opd_top_k": s.top_k,
    }
    updates: dict[str, Any] = {"algorithm": algorithm, "trainer": {"steps": s.steps}}
    if s.lr is not None:
        updates["optim"] = {"lr": s.lr}
    fresh = _fresh_evaluation(teacher, teacher_eval, seed)
    if fresh is not None:  # the student's loop evaluates only after training
        updates["heldout"] = {"before_training": False}
    warm = None
    if s.warm_start:
        kd = out / "student-kd"
        warm = _warm_start(teacher, kd, seed, s.label_weight, overrides, console)
    if warm is not None:
        phases["student_kd_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        # OPD from the distilled checkpoint
        updates["model"] = {"init_from": warm["run"]}
        if fresh is None:  # the student's own step 0 is no longer the fresh model
            fresh_cfg = _run_config(teacher, out / "base-eval", seed, dict(overrides))
            fresh = (evaluate_base(fresh_cfg), f"{out / 'base-eval'} (the fresh model)")
        updates["heldout"] = {"before_training": False}

    student_cfg = _run_config(teacher, out / "student", seed, merge(updates, dict(overrides)))
    _train(student_cfg, console)
    phases["student_s"] = time.perf_counter() - t0  # with its evaluations
    evaluations = read_results(out / "student")
    student = evaluations[-1]
    base, base_source = fresh or (evaluations[0], f"{out / 'student'}/heldout.jsonl (step 0)")
    return student, base, base_source, warm


def run_distill_demo(
    teacher_dir: str | Path,
    out_dir: str | Path = DEFAULT_OUT,
    seed: int | None = None,
    settings: DistillSettings | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, object]:
    """Distil the terminal run `teacher_dir` into a fresh student, train the RL baseline for
    as many sampled tokens, evaluate all three (module docstring); writes `results.json` and
    `report.md` under `out_dir` and returns the results. `seed` None: the teacher run's (the
    same held-out sampling seeds as its evaluations); `overrides` deep-merge into both runs'
    configs."""
    from rich.console import Console

    s = settings or DistillSettings()
    check_out(out_dir)
    teacher = find_teacher(teacher_dir)
    seed = teacher.config.seed if seed is None else seed
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    started = time.perf_counter()
    if teacher.config.model.source.value == "smollm2":
        terminal._fetch_smollm2(console)
    phases: dict[str, float] = {}

    t0 = time.perf_counter()
    teacher_eval, teacher_source = _teacher_evaluation(teacher, out, seed)
    phases["teacher_eval_s"] = time.perf_counter() - t0

    student, base, base_source, warm = _student(
        teacher, teacher_eval, out, seed, s, overrides or {}, console, phases
    )
    student_tokens = _sampled_tokens(out / "student")

    t0 = time.perf_counter()
    rl_run, rl_tokens, chunks = _rl_baseline(
        teacher, out, seed, _episode_tokens(out / "student"), s, overrides or {}, console
    )
    phases["rl_baseline_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rl = _evaluate_checkpoint(teacher, rl_run, out / "rl-baseline-eval", seed)
    phases["rl_baseline_eval_s"] = time.perf_counter() - t0

    runs = {"teacher": teacher_eval, "base": base, "student": student, "rl_baseline": rl}
    tokens = {"student": _episode_tokens(out / "student"), "rl_baseline": _episode_tokens(rl_run)}
    per_step = {"student": student_tokens, "rl_baseline": rl_tokens}
    sources = {"teacher": teacher_source, "base": base_source}
    results = _results(teacher, sources, s, seed, runs, tokens, per_step)
    results.update(rl_chunks=chunks, phases_s=phases, wall_s=time.perf_counter() - started)
    results["opd"] = _opd_metrics(out / "student")
    results["warm_start"] = warm
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "report.md").write_text(distill_markdown(results))
    console.print(
        f"held-out success: teacher {teacher_eval.success:.1%}, fresh model {base.success:.1%}, "
        f"student (OPD) {student.success:.1%}, RL baseline {rl.success:.1%}; student / teacher "
        f"{results['student_vs_teacher']}; report: {out / 'report.md'}"
    )
    return results


def _opd_metrics(run_dir: Path) -> dict[str, list[float]]:
    """The student's per-step distillation metrics (`opd/*`, from `metrics.jsonl`)."""
    from skyrl_sdk.trainer.metrics import read_metrics

    rows = sorted(read_metrics(run_dir / "metrics.jsonl"), key=lambda r: r["step"])
    keys = ("opd/reverse_kl", "opd/teacher_logprob", "time/teacher_s")
    return {k.split("/", 1)[1]: [float(r[k]) for r in rows if k in r] for k in keys}


def _paired(a: HeldoutResult, b: HeldoutResult, names: tuple[str, str]) -> dict[str, object] | None:
    """`b` against `a`, task by task (both played the same held-out episodes)."""
    from skyrl_sdk.trainer.heldout import compare_evaluations

    comparison = compare_evaluations(a, b)
    if comparison is None:
        return None
    return {**comparison.to_json(), "sentence": comparison.sentence(*names)}


def _results(
    teacher: TeacherRun,
    sources: Mapping[str, str],
    s: DistillSettings,
    seed: int,
    runs: Mapping[str, HeldoutResult],
    tokens: Mapping[str, int],
    per_step: Mapping[str, list[int]],
) -> dict[str, object]:
    base = runs["base"].success

    def per_1k(name: str) -> dict[str, float]:
        k = max(tokens[name], 1) / 1000
        return {
            "success_per_1k_tokens": runs[name].success / k,
            "gain_per_1k_tokens": (runs[name].success - base) / k,
        }

    cfg = teacher.config
    teacher_success = runs["teacher"].success
    return {
        "task": "distill",
        "teacher": str(teacher.run_dir),
        "teacher_evaluation": sources["teacher"],
        "base_evaluation": sources["base"],
        "model": terminal._model_label(cfg),
        "seed": seed,
        "settings": asdict(s),
        "families": sorted(runs["teacher"].families),
        "heldout": {
            "episodes": runs["teacher"].episodes,
            "temperature": runs["teacher"].temperature,
            "env_kwargs": cfg.heldout.env_kwargs,
            "max_tokens": cfg.rollout.max_tokens,
        },
        "evaluations": {name: evaluation_json(r) for name, r in runs.items()},
        "student_vs_teacher": (
            round(runs["student"].success / teacher_success, 4) if teacher_success else None
        ),
        "student_vs_rl_baseline": _paired(runs["rl_baseline"], runs["student"], ("RL", "OPD")),
        "student_vs_base": _paired(runs["base"], runs["student"], ("fresh", "OPD")),
        "sampled_tokens": dict(tokens),
        "sampled_tokens_per_step": dict(per_step),
        "steps": {name: len(v) for name, v in per_step.items()},
        "per_1k_sampled_tokens": {name: per_1k(name) for name in ("student", "rl_baseline")},
    }


def _cell(rate: Mapping[str, Any]) -> str:
    lo, hi = rate["ci95"]
    return f"{rate['success']:.0%} [{lo:.0%}, {hi:.0%}]"


def distill_markdown(results: Mapping[str, Any]) -> str:
    """`report.md`: success of teacher, fresh model, student and RL baseline per family, the
    ratio to the teacher, sampled tokens and success per 1k of them, phase times."""
    ev = results["evaluations"]
    warm = results.get("warm_start")
    student = "student (KD + OPD)" if warm else "student (OPD)"
    names = {"teacher": "teacher", "base": "fresh model", "student": student,
             "rl_baseline": "RL baseline (GRPO)"}  # fmt: skip
    h = results["heldout"]
    ratio = results["student_vs_teacher"]
    lines = [
        f"# skyrl demo --task distill: on-policy distillation into a fresh {results['model']}",
        "",
        f"Student / teacher held-out success: **{ratio if ratio is not None else '-'}** "
        f"(student {_cell(ev['student'])}, teacher {_cell(ev['teacher'])}; {h['episodes']} "
        f"held-out episodes per evaluation, temperature {h['temperature']:g}, 95% Wilson "
        f"intervals). Teacher: `{results['teacher']}`.",
        "",
        "| family | " + " | ".join(names.values()) + " |",
        "|---|" + "---:|" * len(names),
        "| all | " + " | ".join(_cell(ev[k]) for k in names) + " |",
    ]
    for family in results["families"]:
        cells = [_cell(ev[k]["families"][family]) if family in ev[k]["families"] else "-"
                 for k in names]  # fmt: skip
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| run | steps | sampled tokens | success per 1k tokens | gain over fresh per 1k |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ("student", "rl_baseline"):
        p = results["per_1k_sampled_tokens"][key]
        lines.append(
            f"| {names[key]} | {results['steps'][key]} | {results['sampled_tokens'][key]} | "
            f"{p['success_per_1k_tokens']:.4f} | {p['gain_per_1k_tokens']:+.4f} |"
        )
    c = results.get("student_vs_rl_baseline")
    if c:
        lo, hi = c["ci95"]
        lines += [
            "",
            f"OPD vs RL (paired by task): {100 * c['difference']:+.1f} points, 95% interval "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}]; {c['sentence']}.",
        ]
    if warm:
        lines += ["", f"Warm start (KD): {warm['steps']} steps of `skyrl sft` with the teacher's "
                  f"top tokens as targets (+ {warm['label_weight']:g} x the data's NLL) on "
                  f"`{warm['data']}` (no tokens sampled); logit KL "
                  f"{warm['logit_kl_first_last'][0]:.3f} -> {warm['logit_kl_first_last'][1]:.3f}."]  # fmt: skip
    kl = results["opd"]["reverse_kl"]
    if kl:
        lines += ["", f"Student's reverse KL to the teacher (training batches): {kl[0]:.3f} -> "
                  f"{kl[-1]:.3f} over {len(kl)} steps."]  # fmt: skip
    lines += [
        "",
        phase_times(results) + " Runs: `student/` (OPD), `rl-baseline/` (GRPO).",
        "",
    ]
    return "\n".join(lines)
