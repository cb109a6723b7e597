"""`python -m skyrl_sdk.trainer.selfcheck.gpu`: the trainer's GPU path, end to end, in one process.

Meant for a lent machine with one GPU, no internet and no package registry (`make test-gpu`);
it needs only torch and this package, builds its tiny model locally (`lookup-tiny`, random
weights, in a fresh `$SKYRL_CACHE`), and finishes in well under 8 minutes:

    1. device            CUDA present (or `--device cpu`, or `--allow-cpu` without CUDA)
    2. process group     world size 1: NCCL on a GPU (gloo if this torch has no NCCL), gloo on CPU
    3. tiny model        `lookup-tiny` built from its config, no download
    4. LocalEngine       batched decoding on the device
    5. FSDP2 learner     `FSDPLearner` at world size 1, its shards on the device
    6. async training    `AsyncTrainer` with that learner and engine: versions 1..N, the
                         staleness bound held on every step
    7. weight sync       learner -> a fresh engine, device to device, bit-identical
    8. logprobs agree    the engine's sampled logprobs vs the learner's on the same tokens
    9. time budget       the whole run within `--budget-s`

vLLM, Ray and multi-rank NCCL are listed as "not run", with the reason. The report is a table,
then one JSON line (`{"ok": ..., "checks": [...]}`). Exit status: 0 when no check failed,
1 when one did, 2 when CUDA was asked for and is absent (nothing else is run then).

With `--device cpu` the same path runs on the CPU (the test suite does that).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import enum
import importlib.util
import json
import math
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

LOGPROB_TOLERANCE = 1e-3
"""Largest |sampler - learner| logprob allowed on one token. Both sides compute in float32
from bit-identical weights; they differ only in kernel paths (the engine decodes a left-padded
batch one token at a time with a KV cache, the learner runs one right-padded forward over
the whole sequence). Measured on CPU: 5e-7 at most; on a GPU the same float32 arithmetic
(TF32 is turned off by `check_device`) should stay near 1e-5, two orders of magnitude under
this bound. The engine reports logprobs after temperature, as the learner computes them. A
stale or missing weight sync moves them by far more: the check's `control` figure (the
initial weights scoring the same tokens) was 1.1 after 5 steps at lr 1e-2 on CPU, and must
itself exceed this tolerance for the check to pass, so the check can tell versions apart."""

CUDA_MISSING_EXIT = 2
"""Exit status when CUDA was asked for and this machine has none."""


class Status(enum.Enum):
    """Outcome of one check."""

    PASS = "pass"
    """It ran and every assertion held."""
    FAIL = "fail"
    """It ran and an assertion failed or it raised."""
    NOT_RUN = "not run"
    """It could not run here (the reason is in the detail)."""


@dataclass(frozen=True)
class Check:
    """One row of the report."""

    name: str
    """What was checked."""
    status: Status
    """Its outcome."""
    detail: str
    """Figures when it passed; the failure or the reason it did not run otherwise."""
    seconds: float
    """Wall time it took."""


class CheckFailed(AssertionError):
    """An assertion of a check did not hold (the message says which)."""


def require(condition: bool, message: str) -> None:
    """Fail the current check with `message` unless `condition` holds."""
    if not condition:
        raise CheckFailed(message)


@dataclass(frozen=True)
class Options:
    """What to run and how strictly."""

    device: str
    """`cuda` or `cpu`: where the engine and the learner run."""
    allow_cpu: bool
    """With `device` cuda on a machine without CUDA: run on the CPU instead of failing."""
    steps: int
    """Async training steps (policy versions) to train."""
    max_staleness: int
    """The staleness bound of the async run."""
    tolerance: float
    """Largest sampler-learner logprob difference allowed on one token."""
    budget_s: float
    """The whole run must finish within this many seconds."""
    work_dir: Path | None
    """Run directory and model cache (None: a temporary directory, removed afterwards)."""


class Report:
    """Runs checks in order, records each, and turns exceptions into failed rows."""

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.facts: dict[str, Any] = {}
        """Context for the JSON line (device name, torch version, backend)."""

    def run(
        self, name: str, fn: Callable[[], tuple[str, T]], *, needs: Sequence[Any] = ()
    ) -> T | None:
        """`fn()` returns (detail, value); the value is returned, or None when the check
        failed or was not run because an earlier result it `needs` is missing."""
        if any(value is None for value in needs):
            self.add(name, Status.NOT_RUN, "an earlier check it depends on failed", 0.0)
            return None
        started = time.perf_counter()
        try:
            detail, value = fn()
        except Exception as e:  # a failed check is a row of the report, not a traceback
            message = str(e) if isinstance(e, CheckFailed) else f"{type(e).__name__}: {e}"
            if not isinstance(e, CheckFailed):  # on a lent machine there may be no second try
                traceback.print_exc(file=sys.stderr)
            self.add(name, Status.FAIL, message, time.perf_counter() - started)
            return None
        self.add(name, Status.PASS, detail, time.perf_counter() - started)
        return value

    def add(self, name: str, status: Status, detail: str, seconds: float) -> None:
        """Record one row."""
        self.checks.append(Check(name, status, detail, seconds))

    @property
    def ok(self) -> bool:
        """No check failed ("not run" is not a failure)."""
        return all(c.status is not Status.FAIL for c in self.checks)

    def table(self) -> str:
        """The rows as an aligned text table."""
        width = max(len(c.name) for c in self.checks)
        lines = [f"{'check':<{width}}  {'status':<7}  {'time':>7}  detail"]
        lines.append("-" * (width + 2 + 7 + 2 + 7 + 2 + 40))
        for c in self.checks:
            lines.append(f"{c.name:<{width}}  {c.status.value:<7}  {c.seconds:>6.1f}s  {c.detail}")
        return "\n".join(lines)

    def json_line(self) -> str:
        """The whole report as one JSON line."""
        checks = [{**asdict(c), "status": c.status.value} for c in self.checks]
        return json.dumps({"ok": self.ok, **self.facts, "checks": checks})


# -- the checks ---------------------------------------------------------------------------


def check_device(options: Options, report: Report) -> tuple[str, Any]:
    """The torch device to use, or `CheckFailed` when CUDA is asked for and absent."""
    import torch

    report.facts["torch"] = torch.__version__
    if options.device == "cuda" and not torch.cuda.is_available():
        reason = (
            f"CUDA is not available (torch {torch.__version__}, "
            f"built for CUDA {torch.version.cuda or 'none: a CPU-only build'})"
        )
        if not options.allow_cpu:
            raise CheckFailed(
                f"{reason}: this check needs a GPU; `python -m skyrl_sdk.trainer.selfcheck.gpu "
                "--device cpu` (or --allow-cpu) runs the same path on the CPU"
            )
        report.facts["device"] = "cpu"
        return f"{reason}: running on the CPU (--allow-cpu)", torch.device("cpu")
    if options.device == "cpu":
        report.facts["device"] = "cpu"
        return "CPU (--device cpu)", torch.device("cpu")
    torch.cuda.set_device(0)
    # TF32 matmuls would round float32 logits to ~1e-3 and blur the logprob comparison.
    torch.set_float32_matmul_precision("highest")
    name = torch.cuda.get_device_name(0)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    report.facts["device"] = name
    return (
        f"{name}, {total:.0f} GiB, {torch.cuda.device_count()} visible, "
        f"torch {torch.__version__} (CUDA {torch.version.cuda})",
        torch.device("cuda", 0),
    )


def check_process_group(device: Any, report: Report) -> tuple[str, str]:
    """Join a world-size-1 process group on a free local port; returns the backend."""
    import torch.distributed as dist

    # NCCL is what multi-GPU training uses; a torch built without it still runs FSDP2's
    # world-size-1 path on gloo (no collective crosses a device then).
    nccl = device.type == "cuda" and dist.is_nccl_available()
    backend = "nccl" if nccl else "gloo"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}
    )
    os.environ.setdefault("LOCAL_RANK", "0")
    # `FSDPLearner` joins the group already initialised here, so this backend is the one used.
    kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, rank=0, world_size=1, **kwargs)
    report.facts["backend"] = backend
    why = "" if backend == "nccl" or device.type == "cpu" else " (this torch has no NCCL)"
    return f"{backend}{why}, rank 0 of {dist.get_world_size()}, port {port}", backend


def build_config(options: Options, run_dir: Path) -> Any:
    """The run's `TrainConfig`: the smallest `lookup` setup that still exercises staleness."""
    from skyrl_sdk.trainer.config import build_config as build

    return build(
        {},
        [
            f"out_dir={run_dir}",
            "seed=0",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "model.pretrain_steps=0",  # random weights: the check is about plumbing, not skill
            "model.hidden_size=64",
            "model.num_layers=2",
            f"trainer.steps={options.steps}",
            f"trainer.max_staleness={options.max_staleness}",
            "trainer.groups_per_step=2",
            "trainer.step_timeout_s=120",
            "rollout.group_size=4",
            "optim.lr=1e-2",  # large enough that 5 steps visibly move the logprobs (control)
            "logging.console=false",
            "logging.trajectories=false",
        ],
    )


def check_model(config: Any) -> tuple[str, tuple[Any, Any]]:
    """Build the tiny model and its tokenizer from the config, in the (fresh) cache."""
    from skyrl_sdk.trainer.models import load_model

    model, tokenizer = load_model(config.model, seed=config.seed)
    params = sum(p.numel() for p in model.parameters())
    detail = (
        f"{config.model.source.value}: {params:,} parameters, vocab {len(tokenizer)}, "
        f"built under {os.environ.get('SKYRL_CACHE')}"
    )
    return detail, (model, tokenizer)


def new_engine(model: Any, tokenizer: Any, device: Any, name: str) -> Any:
    """A `LocalEngine` on a private copy of `model`, moved to `device`."""
    from skyrl_sdk.agents.engine import LocalEngine

    copy_ = copy.deepcopy(model).eval().requires_grad_(False).to(device)
    return LocalEngine(copy_, tokenizer, max_batch_size=64, name=name, policy_version=0)


def check_engine(model: Any, tokenizer: Any, device: Any) -> tuple[str, Any]:
    """`LocalEngine` on the device decodes a batch of concurrent requests."""
    from skyrl_sdk.agents.policy import SamplingParams

    engine = new_engine(model, tokenizer, device, f"local:{device.type}")
    require(engine.device.type == device.type, f"engine weights on {engine.device}")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "find a"}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False)

    async def generate() -> list[Any]:
        return await asyncio.gather(
            *(engine.generate(ids, SamplingParams(max_tokens=6, seed=i)) for i in range(8))
        )

    completions = asyncio.run(generate())
    tokens = sum(len(c.token_ids) for c in completions)
    logprobs = [lp for c in completions for lp in c.logprobs]
    require(tokens > 0, "no tokens generated")
    require(all(math.isfinite(lp) and lp <= 0 for lp in logprobs), "logprobs not all in (-inf, 0]")
    return (
        f"8 concurrent requests, {tokens} tokens, {engine.steps} decode steps on {engine.device}",
        engine,
    )


def check_learner(model: Any, config: Any, tokenizer: Any, device: Any) -> tuple[str, Any]:
    """`FSDPLearner` at world size 1, with its shards on the device."""
    from torch.distributed.tensor import DTensor

    from skyrl_sdk.trainer.distributed_learner import FSDPLearner
    from skyrl_sdk.trainer.learner import LearnerSettings

    learner = FSDPLearner(
        copy.deepcopy(model).to(device), LearnerSettings.from_config(config, tokenizer)
    )
    params = list(learner.model.parameters())
    require(learner.world_size == 1, f"world size {learner.world_size}, expected 1")
    require(all(isinstance(p, DTensor) for p in params), "parameters are not FSDP2 DTensors")
    placed = {p.to_local().device.type for p in params}
    require(placed == {device.type}, f"shards on {sorted(placed)}, expected {device.type}")
    return f"FSDP2, {len(params)} sharded parameters on {device.type}, world size 1", learner


def async_trainer(config: Any, learner: Any, engine: Any) -> Any:
    """An `AsyncTrainer` of `config` that trains `learner` and samples from `engine` (the
    device ones; both at version 0 with the same initial weights)."""
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer

    return AsyncTrainer(config, learner=learner, engine=engine)


def check_training(config: Any, learner: Any, engine: Any) -> tuple[str, Any]:
    """`AsyncTrainer` runs `trainer.steps` steps: versions 1..N, staleness within bound."""
    trainer = async_trainer(config, learner, engine)
    result = trainer.run()
    steps, bound = config.trainer.steps, config.trainer.max_staleness
    versions = [m["version"] for m in result.history]
    require(versions == list(range(1, steps + 1)), f"versions {versions}, expected 1..{steps}")
    require(
        result.version == learner.version == steps,
        f"final version {result.version} (learner {learner.version}), expected {steps}",
    )
    lags = [m["staleness/max"] for m in result.history]
    require(max(lags) <= bound, f"staleness per step {lags} exceeds the bound {bound}")
    require(engine.policy_version == steps, f"engine at version {engine.policy_version}")
    rewards = [round(m["reward/mean"], 2) for m in result.history]
    tokens = sum(m["tokens/trained"] for m in result.history)
    detail = (
        f"{steps} steps, versions {versions[0]}..{versions[-1]}, staleness max per step {lags} "
        f"(bound {bound}), {tokens} tokens trained, reward {rewards}"
    )
    return detail, trainer


def check_weight_sync(model: Any, tokenizer: Any, learner: Any, device: Any) -> tuple[str, Any]:
    """Learner weights -> a fresh engine on the device: loaded, bit-identical, trained."""
    import torch

    engine = new_engine(model, tokenizer, device, "local:sync")
    weights = learner.engine_weights()
    off = sorted({t.device.type for t in weights.values()} - {device.type})
    require(not off, f"learner weights on {off}, expected {device.type} (a host round trip)")
    engine.update_weights(weights, learner.version)
    require(engine.wait_for_version(learner.version, timeout=30), "engine never loaded them")
    loaded = engine.model.state_dict()
    require(set(loaded) == set(weights), "the engine's keys differ from the learner's")
    differ = [k for k in weights if not torch.equal(loaded[k], weights[k])]
    require(not differ, f"{len(differ)} tensors differ after the sync, e.g. {differ[:3]}")
    initial = model.state_dict()
    moved = sum(not torch.equal(weights[k].cpu(), initial[k]) for k in weights)
    require(moved > 0, "training changed no weight")
    return (
        f"{len(weights)} tensors on {device.type}, identical in the engine at version "
        f"{engine.policy_version}; {moved} changed by training",
        engine,
    )


def check_logprobs(
    trainer: Any, engine: Any, learner: Any, model: Any, tolerance: float
) -> tuple[str, float]:
    """Episodes sampled at the learner's version; the learner rescores the same tokens."""
    import torch

    from skyrl_sdk.agents.rollout import rollout
    from skyrl_sdk.trainer.learner import Learner
    from skyrl_sdk.trainer.loop import SeededPolicy
    from skyrl_sdk.trainer.run_env import make_env

    config = trainer.config
    policy = SeededPolicy(engine, config.seed + 1)

    async def episode(k: int) -> Any:
        env = make_env(config)
        try:
            task = trainer.tasks[k % len(trainer.tasks)]
            return await rollout(
                env,
                policy,
                task,
                limits=trainer.limits,
                sampling=trainer.sampling,
                episode_id=f"check#{k}",
                env_id=config.env.id,
            )
        finally:
            env.close()

    async def play() -> list[Any]:
        return await asyncio.gather(*(episode(k) for k in range(8)))

    trajectories = asyncio.run(play())
    asyncio.run(engine.aclose())
    samples = [s for t in trajectories for s in t.training_samples() if any(s.loss_mask)]
    require(bool(samples), "no trainable samples in 8 episodes")
    versions = {
        v for s in samples for v, m in zip(s.policy_versions, s.loss_mask, strict=True) if m
    }
    require(versions == {learner.version}, f"sampled at versions {versions}, not {learner.version}")
    # The learner's own scoring path (padding, temperature, token logprobs), on its device.
    scored = learner._logprobs_no_grad(samples)
    initial = Learner(
        copy.deepcopy(model).to(learner._device()), learner.settings
    )._logprobs_no_grad(samples)

    def max_diff(rows: Sequence[Any]) -> tuple[float, int]:
        worst, tokens = 0.0, 0
        for s, row in zip(samples, rows, strict=True):
            mask = torch.tensor(s.loss_mask[1:], dtype=torch.bool)
            sampler = torch.tensor(s.logprobs[1:], dtype=torch.float32)
            diff = (row.float().cpu() - sampler)[mask].abs()
            worst, tokens = max(worst, float(diff.max())), tokens + int(mask.sum())
        return worst, tokens

    worst, tokens = max_diff(scored)
    control, _ = max_diff(initial)
    require(
        worst < tolerance,
        f"max |sampler - learner| = {worst:.2e} on {tokens} tokens >= {tolerance:g}",
    )
    require(
        control > tolerance,
        f"control: the initial weights score the same tokens within {control:.2e} "
        f"(<= {tolerance:g}), so this check could not tell versions apart",
    )
    return (
        f"max |sampler - learner| {worst:.1e} over {tokens} tokens of {len(samples)} samples "
        f"(tolerance {tolerance:g}); control (initial weights) {control:.1e}",
        worst,
    )


def not_run_rows(report: Report) -> None:
    """vLLM, Ray and multi-rank NCCL: what this check does not cover here, and why."""
    import torch

    def missing(module: str) -> bool:
        return importlib.util.find_spec(module) is None

    vllm = (
        "vllm is not installed here"
        if missing("vllm")
        else "vllm is installed, but this check keeps to LocalEngine"
    )
    report.add("vLLM engine", Status.NOT_RUN, f"{vllm}; on CPU: `make test-vllm`", 0.0)
    ray = (
        "ray is not installed here"
        if missing("ray")
        else "ray is installed; not part of this check"
    )
    report.add(
        "Ray actors", Status.NOT_RUN, f"{ray}; tests/trainer/test_ray_mode.py covers it", 0.0
    )
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    report.add(
        "multi-rank NCCL",
        Status.NOT_RUN,
        f"needs 2 or more GPUs, this machine has {gpus}; "
        "multi-rank gloo: tests/trainer/test_distributed.py",
        0.0,
    )


# -- driver -------------------------------------------------------------------------------


def run_checks(options: Options, work: Path) -> Report:
    """Every check in order; later ones are "not run" when one they need failed."""
    started = time.perf_counter()
    report = Report()
    device = report.run("device", lambda: check_device(options, report))
    if device is None:
        return report
    backend = report.run("process group", lambda: check_process_group(device, report))
    config = build_config(options, work / "run")
    built = report.run("tiny model", lambda: check_model(config))
    model, tokenizer = built if built is not None else (None, None)
    engine = report.run(
        "LocalEngine", lambda: check_engine(model, tokenizer, device), needs=[built]
    )
    learner = report.run(
        "FSDP2 learner",
        lambda: check_learner(model, config, tokenizer, device),
        needs=[built, backend],
    )
    trainer = report.run(
        f"async training ({options.steps} steps)",
        lambda: check_training(config, learner, engine),
        needs=[engine, learner],
    )
    synced = report.run(
        "weight sync",
        lambda: check_weight_sync(model, tokenizer, learner, device),
        needs=[trainer],
    )
    report.run(
        "logprobs agree",
        lambda: check_logprobs(trainer, synced, learner, model, options.tolerance),
        needs=[synced],
    )
    not_run_rows(report)
    elapsed = time.perf_counter() - started
    report.add(
        "time budget",
        Status.PASS if elapsed <= options.budget_s else Status.FAIL,
        f"{elapsed:.0f} s of {options.budget_s:.0f} s",
        elapsed,
    )
    return report


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m skyrl_sdk.trainer.selfcheck.gpu",
        description="The trainer's GPU path end to end: LocalEngine, FSDP2 learner (world "
        "size 1), weight sync, async steps, sampler/learner logprob agreement.",
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--allow-cpu", action="store_true", help="Without CUDA, run on the CPU instead of failing."
    )
    parser.add_argument("--steps", type=int, default=5, help="Async training steps.")
    parser.add_argument("--max-staleness", type=int, default=1, help="The staleness bound.")
    parser.add_argument("--tolerance", type=float, default=LOGPROB_TOLERANCE)
    parser.add_argument("--budget-s", type=float, default=480.0, help="Time limit of the run.")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="Keep the run and model cache here."
    )
    a = parser.parse_args(argv)
    return Options(
        a.device, a.allow_cpu, a.steps, a.max_staleness, a.tolerance, a.budget_s, a.work_dir
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks, print the table and the JSON line; the exit status."""
    options = parse_args(argv)
    if options.device == "cpu":
        # FSDP2 puts its shards on the default accelerator: hide any GPU for a CPU run.
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    with contextlib.ExitStack() as stack:
        if options.work_dir is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-check-")))
        else:
            work = options.work_dir
            work.mkdir(parents=True, exist_ok=True)
        # A fresh model cache: proves nothing is downloaded or reused from an earlier run.
        os.environ["SKYRL_CACHE"] = str(work / "cache")
        try:
            report = run_checks(options, work)
        finally:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
    print(report.table())
    print(report.json_line())
    sys.stdout.flush()
    if report.checks[0].status is Status.FAIL:
        return CUDA_MISSING_EXIT
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
