"""`skyrl bench trainer`: learner training throughput, ours against TRL's `GRPOTrainer`.

Workload. Both sides train the same tiny Qwen2 (built from a config by `agents.tiny`, saved
once to a directory that both load with `from_pretrained`, fp32, SDPA attention) on the same
batch: `sequences` sequences in groups of `group_size` that share a prompt, every prompt
`prompt_tokens` long and every completion `completion_tokens` long (no padding), the same
token ids and the same per-sequence advantages (GRPO-normalised seeded rewards). Both use the
same loss family and settings: PPO-clip surrogate with clip range [1 - 0.2, 1 + 0.28],
token-mean over all completion tokens of the batch (our `token_mean`; TRL's `dapo`), no KL
term (no reference model), no entropy bonus, one optimizer step (AdamW, betas (0.9, 0.99),
no weight decay, constant learning rate) per batch after gradient accumulation over
micro-batches of `micro_batch_size` sequences, global grad-norm clipping at 1.0, fp32 on CPU,
the same `torch.set_num_threads`, no gradient checkpointing.

What is timed on each side: one optimizer step's wall time, from batch to updated weights.

- Ours: one `Learner.train_step(samples, advantages)` call on `TrainingSample`s (as
  `trainer.async_trainer.build_batch` hands them over): padding/tensor building, forward and
  backward of every micro-batch (with its truncated-IS weights, dual-clip and statistics, as
  the learner always computes them), clipping, optimizer and scheduler step.
- TRL: `GRPOTrainer.train()` runs unmodified except that `_generate_and_score_completions`
  (generation and reward scoring, which are not training) returns the prepared batch, in the
  exact dict layout TRL produces itself (`prompt_ids/_mask`, `completion_ids/_mask`,
  `advantages`, `num_items_in_batch`). A `TrainerCallback` times `on_step_begin` to
  `on_step_end`: `_prepare_inputs` (the stub, TRL's shuffle and split into micro-batches),
  forward (TRL's chunked fused LM head, log-probs + entropy) and backward of every
  micro-batch, clipping, `optimizer.step` (TRL's default optimizer, fused AdamW), scheduler
  step and `zero_grad`. Dataloader fetches, logging and callbacks outside that window are
  not timed (nor are they on our side, which has none).

So each side is timed over the same work, the training computation of one batch, with its
own framework overhead included and generation excluded. With `num_iterations=1`, `beta=0`
and `steps_per_generation == gradient_accumulation_steps`, TRL computes no old/reference
log-probs, and with `mini_batches=1` neither do we: one forward + backward per sequence each.

Differences left in, each the framework's own default: we also compute truncated-IS weights
against the sampler's logprobs, the dual clip (c = 3) and a KL-to-sampler statistic; TRL
computes its clip-ratio metrics. We run `torch.optim.AdamW` (for-loop kernel on CPU); TRL's
default is fused AdamW. On CPU, TRL's fused LM head scores every position in tiles instead
of materialising the logits; we materialise `[micro-batch, tokens, vocab]` logits.

Throughput: trained (completion) tokens per second of wall time, `sequences *
completion_tokens` per step divided by the step time. All tokens (prompt + completion) per
second are reported too, and so are rates per CPU second of each side's training process
(less sensitive to other jobs on a shared machine; the headline stays wall time). Each round
runs `warmup_steps` untimed steps then `steps_per_round` timed ones on each side, alternating
sides (ours, then TRL); each side's best round counts (slower rounds measure interference
from other jobs on a shared machine, not the code). TRL runs in its own virtualenv
`.venvs/trl` (created on first use: `TRL_REQUIREMENTS`) as one long-lived worker process that
trains a round (one `train()` call) each time it is asked, so its start-up is paid once and
the rounds still interleave.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.benchmarks.perf.peer_venv import VENVS, PeerUnavailable
from skyrl_sdk.benchmarks.perf.report import BenchReport

TRL_HOME = VENVS / "trl"
"""The TRL virtualenv (never our own environment: its pins could change what we measure)."""
TRL_REQUIREMENTS: tuple[str, ...] = ("trl==1.16.0", "torch==2.13.0")
"""What `.venvs/trl` installs. The torch pin matches the local CPU wheel, so pip never pulls a
multi-GB CUDA build; pip then picks a `transformers` that TRL accepts."""
PROTOCOL_PREFIX = "@@trainer-bench "
"""Prefix of the worker's protocol lines on stdout (anything else it prints is ignored)."""


@dataclass(frozen=True)
class TrainerBenchSettings:
    """Batch shape and measurement knobs (the defaults are what `skyrl bench trainer` runs)."""

    sequences: int = 16
    """Sequences per batch (one optimizer step)."""
    group_size: int = 4
    """Sequences per prompt (GRPO group; TRL's `num_generations`)."""
    prompt_tokens: int = 64
    """Tokens in every prompt."""
    completion_tokens: int = 64
    """Tokens in every completion (the trained tokens)."""
    micro_batch_size: int = 8
    """Sequences per forward/backward; gradients accumulate over `sequences / micro_batch_size`."""
    hidden_size: int = 64
    """Hidden size of the tiny Qwen2 (2 layers, ~1000-token vocabulary)."""
    rounds: int = 5
    """Alternating rounds per side; the best counts."""
    warmup_steps: int = 1
    """Untimed optimizer steps at the start of each round."""
    steps_per_round: int = 3
    """Timed optimizer steps per round."""
    torch_threads: int = 1
    """`torch.set_num_threads` on both sides."""
    lr: float = 1e-5
    """Learning rate (constant) on both sides."""
    seed: int = 0
    """Seed of the batch's token ids and rewards."""
    worker_timeout_s: float = 900.0
    """Longest wait for the TRL worker (start-up or one round)."""

    def __post_init__(self) -> None:
        if self.sequences % self.group_size or self.sequences % self.micro_batch_size:
            raise ValueError("sequences must be a multiple of group_size and of micro_batch_size")
        if min(self.prompt_tokens, self.completion_tokens, self.rounds, self.steps_per_round) < 1:
            raise ValueError("token counts, rounds and steps_per_round must be >= 1")

    @property
    def completion_tokens_per_step(self) -> int:
        """Trained tokens in one batch."""
        return self.sequences * self.completion_tokens

    @property
    def tokens_per_step(self) -> int:
        """All tokens (prompt + completion) in one batch."""
        return self.sequences * (self.prompt_tokens + self.completion_tokens)


@dataclass(frozen=True)
class BenchBatch:
    """The one batch both sides train on, as plain lists (it travels to the worker as JSON)."""

    prompt_ids: list[list[int]]
    """Per sequence, its group's prompt ids."""
    completion_ids: list[list[int]]
    """Per sequence, its completion ids."""
    advantages: list[float]
    """Per sequence, its GRPO advantage (reward minus group mean, over group std)."""


@dataclass(frozen=True)
class RoundTiming:
    """One side's timed steps in one round."""

    step_s: tuple[float, ...]
    """Wall time of each timed optimizer step."""
    cpu_s: tuple[float, ...] = ()
    """CPU time of the training process during each timed step (less sensitive to other jobs)."""

    @property
    def total_s(self) -> float:
        """Wall time of all timed steps."""
        return sum(self.step_s)

    def rate(self, tokens_per_step: int) -> float:
        """Tokens per wall second over the round's timed steps."""
        return tokens_per_step * len(self.step_s) / self.total_s

    def cpu_rate(self, tokens_per_step: int) -> float | None:
        """Tokens per CPU second over the round's timed steps (None when not recorded)."""
        return tokens_per_step * len(self.cpu_s) / sum(self.cpu_s) if sum(self.cpu_s) > 0 else None


def make_batch(
    settings: TrainerBenchSettings, vocab_size: int, special_ids: Sequence[int]
) -> BenchBatch:
    """Seeded token ids (no special tokens) and GRPO advantages for one batch."""
    import random

    rng = random.Random(settings.seed)
    special = set(special_ids)
    ordinary = [i for i in range(vocab_size) if i not in special]
    groups = settings.sequences // settings.group_size
    prompts = [[rng.choice(ordinary) for _ in range(settings.prompt_tokens)] for _ in range(groups)]
    completions = [
        [rng.choice(ordinary) for _ in range(settings.completion_tokens)]
        for _ in range(settings.sequences)
    ]
    advantages: list[float] = []
    for _ in range(groups):
        rewards = [rng.random() for _ in range(settings.group_size)]
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / max(len(rewards) - 1, 1)) ** 0.5
        advantages.extend((r - mean) / (std + 1e-4) for r in rewards)
    return BenchBatch(
        prompt_ids=[prompts[i // settings.group_size] for i in range(settings.sequences)],
        completion_ids=completions,
        advantages=advantages,
    )


# -- our side ------------------------------------------------------------------------------


class OurSide:
    """Our `Learner` on the bench model, with the batch as `TrainingSample`s."""

    def __init__(self, settings: TrainerBenchSettings, model_dir: Path, batch: BenchBatch):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from skyrl_sdk.agents.trajectory import TrainingSample
        from skyrl_sdk.trainer.config import AlgorithmConfig, OptimConfig
        from skyrl_sdk.trainer.learner import Learner, LearnerSettings

        self.settings = settings
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="sdpa"
        )
        # Sampler logprobs as an engine would have reported them: the initial policy's, so the
        # truncated-IS weights start near 1 (their value does not change the work done).
        ids = torch.tensor(
            [p + c for p, c in zip(batch.prompt_ids, batch.completion_ids, strict=True)]
        )
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
            picked = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        p, c = settings.prompt_tokens, settings.completion_tokens
        self.samples = [
            TrainingSample(
                input_ids=tuple(row),
                loss_mask=(0,) * p + (1,) * c,
                logprobs=(0.0,) * p + tuple(picked[i, p - 1 :].tolist()),
                policy_versions=(-1,) * p + (0,) * c,
            )
            for i, row in enumerate(ids.tolist())
        ]
        self.advantages = list(batch.advantages)
        self.learner = Learner(
            model,
            LearnerSettings(
                algorithm=AlgorithmConfig(
                    clip_low=0.2, clip_high=0.28, kl_coef=0.0, entropy_coef=0.0
                ),
                optim=OptimConfig(
                    lr=settings.lr, betas=(0.9, 0.99), weight_decay=0.0, grad_clip=1.0
                ),
                pad_token_id=int(tokenizer.pad_token_id or 0),
                micro_batch_size=settings.micro_batch_size,
            ),
        )

    def round(self) -> RoundTiming:
        """`warmup_steps` untimed then `steps_per_round` timed `train_step` calls."""
        for _ in range(self.settings.warmup_steps):
            self.learner.train_step(self.samples, self.advantages)
        wall, cpu = [], []
        for _ in range(self.settings.steps_per_round):
            start, start_cpu = time.perf_counter(), time.process_time()
            stats = self.learner.train_step(self.samples, self.advantages)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            assert stats.tokens == self.settings.completion_tokens_per_step, stats
        return RoundTiming(tuple(wall), tuple(cpu))


# -- TRL side -------------------------------------------------------------------------------


def trl_ready() -> bool:
    """Whether `.venvs/trl` is installed (with the current `TRL_REQUIREMENTS`)."""
    marker = TRL_HOME / ".ready"
    return marker.exists() and marker.read_text() == " ".join(TRL_REQUIREMENTS)


def trl_python(*, install: bool = True) -> Path:
    """The interpreter of `.venvs/trl`, installing TRL there first if needed (and allowed)."""
    python = TRL_HOME / "bin" / "python"
    if trl_ready():
        return python
    if not install:
        raise PeerUnavailable(f"{TRL_HOME} is not installed (run `skyrl bench trainer` once)")
    if not python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(TRL_HOME)
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    proc = subprocess.run([*cmd, *TRL_REQUIREMENTS], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise PeerUnavailable(
            f"pip install {' '.join(TRL_REQUIREMENTS)} failed:\n{proc.stderr[-2000:]}"
        )
    (TRL_HOME / ".ready").write_text(" ".join(TRL_REQUIREMENTS))
    return python


TRL_WORKER = r'''
import json, os, sys, tempfile, time

spec = json.load(open(sys.argv[1]))
PREFIX = spec["prefix"]


def say(obj):
    print(PREFIX + json.dumps(obj), flush=True)


import torch

torch.set_num_threads(spec["threads"])
import transformers
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

n, mb, c = spec["sequences"], spec["micro_batch_size"], spec["completion_tokens"]
prompt_ids = torch.tensor(spec["prompt_ids"], dtype=torch.long)
completion_ids = torch.tensor(spec["completion_ids"], dtype=torch.long)
completion_mask = torch.ones_like(completion_ids)
BATCH = {
    "prompt_ids": prompt_ids,
    "prompt_mask": torch.ones_like(prompt_ids),
    "completion_ids": completion_ids,
    "completion_mask": completion_mask,
    "advantages": torch.tensor(spec["advantages"], dtype=torch.float32),
    "num_items_in_batch": completion_mask.sum(),
}


class PreparedBatchGRPO(GRPOTrainer):
    """GRPOTrainer whose generation + scoring hands back the prepared batch."""

    def _generate_and_score_completions(self, generation_batch):
        return dict(BATCH)


class StepTimer(TrainerCallback):
    def __init__(self):
        self.step_s, self.cpu_s, self._start = [], [], (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        self.step_s.append(time.perf_counter() - self._start[0])
        self.cpu_s.append(time.process_time() - self._start[1])


def no_reward(completions, **kwargs):
    return [0.0] * len(completions)


tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
model = AutoModelForCausalLM.from_pretrained(
    spec["model_dir"], dtype=torch.float32, attn_implementation="sdpa"
)
groups = n // spec["group_size"]
dataset = Dataset.from_dict({"prompt": ["bench"] * (groups * 64)})
timer = StepTimer()
out_dir = tempfile.mkdtemp(prefix="trl-bench-")
args = GRPOConfig(
    output_dir=out_dir,
    use_cpu=True,
    bf16=False,
    fp16=False,
    activation_checkpointing=False,
    per_device_train_batch_size=mb,
    gradient_accumulation_steps=n // mb,
    num_generations=spec["group_size"],
    max_completion_length=c,
    max_steps=spec["warmup_steps"] + spec["steps_per_round"],
    learning_rate=spec["lr"],
    lr_scheduler_type="constant",
    warmup_steps=0,
    weight_decay=0.0,
    adam_beta1=0.9,
    adam_beta2=0.99,
    max_grad_norm=1.0,
    loss_type="dapo",
    epsilon=0.2,
    epsilon_high=0.28,
    beta=0.0,
    num_iterations=1,
    temperature=1.0,
    logging_steps=10**6,
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    dataloader_num_workers=0,
    seed=spec["seed"],
)
trainer = PreparedBatchGRPO(
    model=model,
    reward_funcs=no_reward,
    args=args,
    train_dataset=dataset,
    processing_class=tokenizer,
    callbacks=[timer],
)
say(
    {
        "ready": True,
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "optim": getattr(args.optim, "value", str(args.optim)),
        "loss_type": args.loss_type,
        "checkpointing": bool(getattr(trainer.model, "is_activation_checkpointing", False)),
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "steps_per_generation": args.steps_per_generation,
    }
)
for line in sys.stdin:
    if line.strip() != "round":
        break
    timer.step_s, timer.cpu_s = [], []
    trainer.train()
    warm = spec["warmup_steps"]
    say({"step_s": timer.step_s[warm:], "cpu_s": timer.cpu_s[warm:]})
'''


class TrlWorker:
    """One long-lived TRL process in `.venvs/trl`: trains a round each time `round()` asks."""

    def __init__(
        self, settings: TrainerBenchSettings, model_dir: Path, batch: BenchBatch, python: Path
    ):
        self.settings = settings
        self._tmp = tempfile.TemporaryDirectory(prefix="skyrl-bench-trainer-")
        spec = {
            "prefix": PROTOCOL_PREFIX,
            "model_dir": str(model_dir),
            "threads": settings.torch_threads,
            "sequences": settings.sequences,
            "group_size": settings.group_size,
            "micro_batch_size": settings.micro_batch_size,
            "completion_tokens": settings.completion_tokens,
            "warmup_steps": settings.warmup_steps,
            "steps_per_round": settings.steps_per_round,
            "lr": settings.lr,
            "seed": settings.seed,
            **asdict(batch),
        }
        spec_path = Path(self._tmp.name) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        self._stderr = open(Path(self._tmp.name) / "stderr.log", "w+")  # noqa: SIM115
        threads = str(settings.torch_threads)
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        env.pop("PYTHONPATH", None)
        # Outside the repo, so none of our packages shadow the peer's imports.
        self._proc = subprocess.Popen(
            [str(python), "-c", TRL_WORKER, str(spec_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            cwd=self._tmp.name,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.info: dict[str, Any] = self._reply()
        """What the worker reported at start-up (versions, TRL's effective settings)."""

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(PROTOCOL_PREFIX):
                self._lines.put(line[len(PROTOCOL_PREFIX) :])
        self._lines.put(None)

    def _reply(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=self.settings.worker_timeout_s)
        except queue.Empty:
            line = None
        if line is None:
            self._stderr.flush()
            self._stderr.seek(0)
            tail = self._stderr.read()[-2000:]
            self.close()
            last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            raise PeerUnavailable(f"TRL worker failed or timed out: {last}\n{tail}")
        return json.loads(line)

    def round(self) -> RoundTiming:
        """Ask for one round; return its timed steps."""
        assert self._proc.stdin is not None
        self._proc.stdin.write("round\n")
        self._proc.stdin.flush()
        got = self._reply()
        return RoundTiming(tuple(got["step_s"]), tuple(got["cpu_s"]))

    def close(self) -> None:
        """Stop the worker (idempotent)."""
        if self._stderr.closed:
            return
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write("quit\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()
        self._tmp.cleanup()


# -- the benchmark ----------------------------------------------------------------------------


def bench_model_dir(settings: TrainerBenchSettings) -> Path:
    """The tiny model both sides load (built once, cached)."""
    from skyrl_sdk.agents.tiny import tiny_model_dir

    return tiny_model_dir(hidden_size=settings.hidden_size, seed=settings.seed)


def measure(
    settings: TrainerBenchSettings | None = None, *, peer: bool = True, install: bool = True
) -> tuple[dict[str, Any], dict[str, list[RoundTiming]]]:
    """Alternate rounds of ours and TRL's; returns (the JSON result, every round's timing).

    `peer=False` measures our side only; `install=False` never builds `.venvs/trl` (the TRL
    side is then skipped, with the reason in the result, when it is not installed yet).
    """
    import torch
    from transformers import AutoTokenizer

    settings = settings or TrainerBenchSettings()
    model_dir = bench_model_dir(settings)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = make_batch(settings, len(tokenizer), tokenizer.all_special_ids)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(settings.torch_threads)
    rounds: dict[str, list[RoundTiming]] = {"ours": [], "trl": []}
    worker: TrlWorker | None = None
    peer_error: str | None = None if peer else "not measured (peer=False)"
    try:
        ours = OurSide(settings, model_dir, batch)
        if peer:
            try:
                worker = TrlWorker(settings, model_dir, batch, trl_python(install=install))
            except PeerUnavailable as e:
                peer_error = str(e)
        for _ in range(settings.rounds):
            rounds["ours"].append(ours.round())
            if worker is not None:
                try:
                    rounds["trl"].append(worker.round())
                except PeerUnavailable as e:
                    peer_error, worker = str(e), None
    finally:
        torch.set_num_threads(threads_before)
        info = worker.info if worker is not None else {}
        if worker is not None:
            worker.close()
    return _result(settings, rounds, info, peer_error), rounds


def _result(
    settings: TrainerBenchSettings,
    rounds: dict[str, list[RoundTiming]],
    trl_info: dict[str, Any],
    peer_error: str | None,
) -> dict[str, Any]:
    import torch
    import transformers

    trained, total = settings.completion_tokens_per_step, settings.tokens_per_step
    ours = max(r.rate(trained) for r in rounds["ours"])
    trl = max((r.rate(trained) for r in rounds["trl"]), default=None)

    def best_step(side: str) -> float | None:
        steps = [s for r in rounds[side] for s in r.step_s]
        return round(min(steps), 5) if steps else None

    def best_cpu(side: str) -> float | None:
        rates = [x for r in rounds[side] if (x := r.cpu_rate(trained)) is not None]
        return max(rates) if rates else None

    ours_cpu, trl_cpu = best_cpu("ours"), best_cpu("trl")
    return {
        "ours_tokens_per_s": round(ours, 1),
        "trl_tokens_per_s": round(trl, 1) if trl else None,
        "ratio": round(ours / trl, 3) if trl else None,
        "tokens": "completion (trained) tokens per wall second, best round",
        "ours_cpu_tokens_per_s": round(ours_cpu, 1) if ours_cpu else None,
        "trl_cpu_tokens_per_s": round(trl_cpu, 1) if trl_cpu else None,
        "cpu_ratio": round(ours_cpu / trl_cpu, 3) if ours_cpu and trl_cpu else None,
        "ours_all_tokens_per_s": round(ours * total / trained, 1),
        "trl_all_tokens_per_s": round(trl * total / trained, 1) if trl else None,
        "ours_best_step_s": best_step("ours"),
        "trl_best_step_s": best_step("trl"),
        "sequences": settings.sequences,
        "group_size": settings.group_size,
        "prompt_tokens": settings.prompt_tokens,
        "completion_tokens": settings.completion_tokens,
        "micro_batch_size": settings.micro_batch_size,
        "hidden_size": settings.hidden_size,
        "torch_threads": settings.torch_threads,
        "rounds": settings.rounds,
        "steps_per_round": settings.steps_per_round,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl_info.get("trl"),
        "trl_transformers": trl_info.get("transformers"),
        "trl_torch": trl_info.get("torch"),
        "trl_optim": trl_info.get("optim"),
        "trl_error": peer_error.splitlines()[0] if peer_error else None,
    }


def run(settings: TrainerBenchSettings | None = None, *, install: bool = True) -> BenchReport:
    """`skyrl bench trainer` (`install=False`: never build `.venvs/trl`, skip TRL if absent)."""
    settings = settings or TrainerBenchSettings()
    result, rounds = measure(settings, install=install)
    trained = settings.completion_tokens_per_step

    def fmt(x: float | None, spec: str = ",.0f") -> str:
        return format(x, spec) if x else "n/a"

    def per_round(side: str) -> str:
        return ", ".join(f"{r.rate(trained):,.0f}" for r in rounds[side]) or "n/a"

    rows = [
        (
            "completion tokens / wall s (best round)",
            fmt(result["ours_tokens_per_s"]),
            fmt(result["trl_tokens_per_s"]),
        ),
        (
            "all tokens / wall s (prompt + completion)",
            fmt(result["ours_all_tokens_per_s"]),
            fmt(result["trl_all_tokens_per_s"]),
        ),
        (
            "completion tokens / CPU s of the training process",
            fmt(result["ours_cpu_tokens_per_s"]),
            fmt(result["trl_cpu_tokens_per_s"]),
        ),
        (
            "fastest optimizer step, ms",
            fmt(result["ours_best_step_s"] and result["ours_best_step_s"] * 1e3, ".1f"),
            fmt(result["trl_best_step_s"] and result["trl_best_step_s"] * 1e3, ".1f"),
        ),
        ("ratio ours / TRL, wall (target >= 1.0)", fmt(result["ratio"], ".2f"), ""),
        ("ratio ours / TRL, CPU", fmt(result["cpu_ratio"], ".2f"), ""),
    ]
    trl_name = f"TRL {result['trl']} GRPOTrainer" if result["trl"] else "TRL GRPOTrainer"
    notes = [
        f"batch: {settings.sequences} sequences ({settings.sequences // settings.group_size} "
        f"prompts x {settings.group_size}), {settings.prompt_tokens} prompt + "
        f"{settings.completion_tokens} completion tokens, micro-batch {settings.micro_batch_size}, "
        f"tiny Qwen2 (hidden {settings.hidden_size}), fp32, {settings.torch_threads} torch thread(s)",
        f"ours: Learner.train_step (PPO-clip, token-mean); baseline: {trl_name} (loss_type=dapo, "
        f"optim={result['trl_optim'] or 'n/a'}) with generation replaced by the prepared batch, "
        ".venvs/trl",
        f"best of {settings.rounds} alternating rounds of {settings.steps_per_round} timed steps "
        f"(+{settings.warmup_steps} warm-up) per side",
        f"ours per round: {per_round('ours')}",
        f"TRL per round:  {per_round('trl') if rounds['trl'] else result['trl_error']}",
    ]
    return BenchReport("trainer", rows, result, notes)


if __name__ == "__main__":  # pragma: no cover - `skyrl bench trainer` is the entry point
    run().print(json_line="--json" in sys.argv)
