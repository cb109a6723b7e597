"""`skyrl sft CONFIG`: supervised training on token-exact trajectories or chat rows.

The config is the training config (`skyrl train`'s) with `algorithm.loss: cross_entropy`
(the default here; another loss is refused) and an `sft` section naming the data
(`SFTConfig`). The model, `model.init_from`, LoRA, the optimizer and its schedule,
`trainer.steps`, checkpoints, `--resume` and the metrics sinks are the RL trainer's; the
learner is the same `Learner`, with every sample's advantage 1 (so `cross_entropy` is the mean
negative log-likelihood of the trained tokens) and no importance weights (`supervised`).

Data (`read_samples`), one JSONL file or a directory of them, each line either

- a `Trajectory` (`skyrl eval`'s `trajectories.jsonl`, `skyrl serve --capture` sessions):
  trained on exactly the ids the policy sampled (`Trajectory.training_samples`: loss on the
  sampled tokens, none on prompts and observations); `sft.min_reward` filters them;
- a chat row `{"messages": [...]}`: rendered with the model's chat template, loss on the
  assistant messages' tokens only.

With `sft.teacher` the run distils instead (word-level knowledge distillation): the teacher
scores each step's sequences and the loss is the KL from its `sft.teacher_top_k` most likely
next tokens to the model's distribution at every trained position (`losses.logit_kl`; the
data's own tokens are then only the prefixes, plus `sft.label_weight` times their NLL),
logged as `sft/logit_kl` (and `sft/label_loss`).

A seeded share of the sequences (`sft.heldout_fraction`) is held out; their NLL per trained
token (`sft/heldout_nll`) is measured before the first step, every `sft.eval_every` steps and
after the last. The run directory is a training run's: `config.yaml`, `metrics.jsonl`,
`checkpoints/` (which `model.init_from` and `skyrl export` read) and `summary.json`.
Each step's sequences are packed (`sft.pack`, `trainer.packing`): concatenated into rows of
up to `sft.max_packed_tokens` tokens (by default the step's longest sequence), positions
restarting and attention confined to each sequence, `trainer.micro_batch_size` rows per forward
pass; the loss is the padded one (the mean NLL per trained token of the step's batch), only the
padding goes. `sft.pack: false` pads `trainer.micro_batch_size` sequences per forward instead.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import typer

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.trajectory import TrainingSample, Trajectory
from skyrl_sdk.trainer import losses, opd
from skyrl_sdk.trainer.checkpoint import (
    Checkpointer,
    CheckpointState,
    capture_rng,
    check_resume_config,
    restore_rng,
)
from skyrl_sdk.trainer.config import (
    Backend,
    DistributedStrategy,
    PolicyLoss,
    SFTConfig,
    TrainConfig,
)
from skyrl_sdk.trainer.learner import Learner, LearnerSettings
from skyrl_sdk.trainer.metrics import build_sinks, truncate_metrics
from skyrl_sdk.trainer.models import load_model
from skyrl_sdk.trainer.run import seed_everything


class SFTDataError(ValueError):
    """The SFT data is missing, unreadable, or leaves nothing to train on."""


@dataclass(frozen=True)
class SFTData:
    """The sequences of one run, split."""

    train: tuple[TrainingSample, ...]
    """Sequences trained on."""
    heldout: tuple[TrainingSample, ...]
    """Sequences whose NLL is measured (never trained on)."""
    dropped: int
    """Rows left out: below `min_reward`, text-only, too long, or without trained tokens."""


@dataclass(frozen=True)
class SFTResult:
    """What `train_sft` did."""

    steps: int
    """Optimizer steps completed (over all resumes)."""
    heldout_nll_start: float | None
    """Held-out NLL per trained token before the first step of this process (None: no
    held-out split)."""
    heldout_nll_end: float | None
    """Held-out NLL after the last step."""
    run_dir: Path
    """Where the run's files are."""


# -- data ----------------------------------------------------------------------------------


def chat_sample(renderer: ChatRenderer, messages: Sequence[Any]) -> TrainingSample:
    """A chat conversation rendered by `renderer`'s template, loss 1 on the tokens of each
    assistant message (its content and end-of-turn marker), 0 on everything else.

    The template must be append-only over the conversation (each prefix renders as the start
    of the whole), else `SFTDataError`.
    """
    ids: list[int] = []
    mask: list[int] = []
    done = ""  # the text rendered into `ids` so far
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = renderer.render(messages[:i], add_generation_prompt=True)
        upto = renderer.render(messages[: i + 1], add_generation_prompt=False)
        if not (prompt.startswith(done) and upto.startswith(prompt)):
            raise SFTDataError(
                "the chat template does not render this conversation append-only "
                f"(at message {i}), so its assistant tokens cannot be told apart"
            )
        for text, trained in ((prompt[len(done) :], 0), (upto[len(prompt) :], 1)):
            piece = renderer.encode(text) if text else ()
            ids.extend(piece)
            mask.extend([trained] * len(piece))
        done = upto
    n = len(ids)
    return TrainingSample(tuple(ids), tuple(mask), (0.0,) * n, tuple(0 if m else -1 for m in mask))


def read_samples(
    path: str | Path, renderer: ChatRenderer, sft: SFTConfig
) -> tuple[list[TrainingSample], int]:
    """The sequences of a JSONL file or a directory of them (see the module docstring), in
    file order, and how many rows were left out."""
    p = Path(path)
    files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise SFTDataError(f"sft.data: no JSONL file at {str(path)!r}")
    samples: list[TrainingSample] = []
    dropped = 0
    for file in files:
        for number, line in enumerate(file.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows = _row_samples(json.loads(line), renderer, sft)
            except (ValueError, KeyError, TypeError) as e:
                raise SFTDataError(f"{file}:{number}: {e}") from None
            kept = [
                s
                for s in rows
                if any(s.loss_mask[1:])
                and (sft.max_length is None or len(s.input_ids) <= sft.max_length)
            ]
            dropped += not kept
            samples.extend(kept)
    return samples, dropped


def _row_samples(row: Any, renderer: ChatRenderer, sft: SFTConfig) -> list[TrainingSample]:
    if isinstance(row, dict) and "messages" in row and "segments" not in row:
        return [chat_sample(renderer, row["messages"])]
    trajectory = Trajectory.from_json(row)
    if sft.min_reward is not None and trajectory.reward < sft.min_reward:
        return []
    return trajectory.training_samples() if trajectory.trainable else []


def load_data(path: str | Path, renderer: ChatRenderer, sft: SFTConfig, seed: int) -> SFTData:
    """`read_samples`, split into training and held-out sequences by a seeded shuffle (at
    least one held out when `heldout_fraction` > 0 and there are two or more)."""
    samples, dropped = read_samples(path, renderer, sft)
    order = list(range(len(samples)))
    random.Random(f"{seed}:sft-split").shuffle(order)
    k = round(len(samples) * sft.heldout_fraction)
    if sft.heldout_fraction > 0 and len(samples) > 1:
        k = max(k, 1)
    heldout = tuple(samples[i] for i in sorted(order[:k]))
    train = tuple(samples[i] for i in sorted(order[k:]))
    if not train:
        raise SFTDataError(
            f"sft.data {str(path)!r}: no sequence to train on ({len(samples)} read, "
            f"{dropped} rows left out, {len(heldout)} held out)"
        )
    return SFTData(train, heldout, dropped)


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> list[int]:
    """The training sequences of optimizer step `step` (0-based): consecutive positions of
    seeded per-epoch shuffles of `range(n)`, so a resumed run trains what it would have."""
    out = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n)
        order = list(range(n))
        random.Random(f"{seed}:sft:{epoch}").shuffle(order)
        out.append(order[offset])
    return out


@torch.no_grad()
def heldout_nll(
    model: Any, samples: Sequence[TrainingSample], pad_id: int, chunk: int = 8
) -> float:
    """The mean negative log-likelihood per trained token (loss mask 1) of `samples` under
    `model` (dropout off), at temperature 1."""
    total, tokens = 0.0, 0.0
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(samples), chunk):
            part = samples[start : start + chunk]
            width = max(len(s.input_ids) for s in part)
            ids = torch.full((len(part), width), pad_id, dtype=torch.long)
            attention = torch.zeros_like(ids)
            mask = torch.zeros((len(part), width), dtype=torch.float32)
            for row, s in enumerate(part):
                ids[row, : len(s.input_ids)] = torch.tensor(s.input_ids)
                attention[row, : len(s.input_ids)] = 1
                mask[row, : len(s.input_ids)] = torch.tensor(s.loss_mask, dtype=torch.float32)
            ids, attention, mask = ids.to(device), attention.to(device), mask.to(device)
            logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
            logp = losses.token_logprobs(logits, ids[:, 1:])
            total += float(-(logp * mask[:, 1:]).sum())
            tokens += float(mask[:, 1:].sum())
    finally:
        model.train(was_training)
    return total / max(tokens, 1.0)


# -- the run -------------------------------------------------------------------------------


def sft_config(config: TrainConfig) -> TrainConfig:
    """`config` with `algorithm.loss: cross_entropy` unless the config set a loss itself
    (which must then be it), and `sft.data` given; `SFTDataError` otherwise."""
    if config.sft.data is None:
        raise SFTDataError("sft.data is required: a JSONL file of trajectories or chat rows")
    if config.backend is not Backend.LOCAL or config.distributed.strategy is not (
        DistributedStrategy.NONE
    ):
        raise SFTDataError(
            "skyrl sft trains in this process: backend 'local', distributed.strategy 'none'"
        )
    algorithm = config.algorithm
    if "loss" not in algorithm.model_fields_set:
        algorithm = algorithm.model_copy(update={"loss": PolicyLoss.CROSS_ENTROPY})
    if algorithm.loss is not PolicyLoss.CROSS_ENTROPY:
        raise SFTDataError(
            f"skyrl sft trains with algorithm.loss: cross_entropy, not {algorithm.loss.value!r}"
        )
    return config.model_copy(update={"algorithm": algorithm})


def packs(config: TrainConfig) -> bool:
    """Whether the learner packs (`LearnerSettings.pack`): `sft.pack`, when the loss is a
    token mean (a row holds several sequences, which a per-sequence reduction would count as
    one); else the batches are padded."""
    return config.sft.pack and config.algorithm.reduction is losses.Reduction.TOKEN_MEAN


def train_sft(config: TrainConfig, *, resume: bool = False, console: Any = None) -> SFTResult:
    """Run supervised training as `config` says (see the module docstring)."""
    config = sft_config(config)
    run_dir = Path(config.out_dir)
    if resume:
        check_resume_config(run_dir, config.model_dump(mode="json"))
    seed_everything(config.seed)
    model, tokenizer = load_model(config.model, seed=config.seed)
    assert config.sft.data is not None
    data = load_data(config.sft.data, ChatRenderer(tokenizer), config.sft, config.seed)
    settings = LearnerSettings.from_config(config, tokenizer)
    settings = replace(
        settings,
        temperature=1.0,
        supervised=True,
        pack=packs(config),
        pack_tokens=config.sft.max_packed_tokens,
    )
    teacher = None
    if config.sft.teacher:
        teacher = opd.load_teacher(config, tokenizer, spec=config.sft.teacher)
        # The data's own tokens get advantage `sft.label_weight` (`_steps`), the logit
        # term weight 1.
        kd = config.algorithm.model_copy(update={"opd_logit_kl_coef": 1.0})
        settings = replace(settings, algorithm=kd)
    learner = Learner(model, settings)
    checkpointer = Checkpointer(run_dir, keep=config.trainer.keep_checkpoints)
    step = 0
    state = checkpointer.load() if resume else None
    if state is not None:
        learner.load_state_dict(state.learner)
        restore_rng(state.rng)
        step = state.step
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config.to_yaml())
    if state is not None:
        truncate_metrics(run_dir / "metrics.jsonl", step)
    sinks = build_sinks(config.logging, run_dir, config.model_dump(mode="json"), console)
    try:
        return _steps(config, learner, data, checkpointer, step, sinks, run_dir, teacher)
    finally:
        sinks.close()


def _steps(
    config: TrainConfig,
    learner: Learner,
    data: SFTData,
    checkpointer: Checkpointer,
    step: int,
    sinks: Any,
    run_dir: Path,
    teacher: Any = None,
) -> SFTResult:
    sft, loop = config.sft, config.trainer
    pad = learner.pad_token_id

    def nll() -> float | None:
        return heldout_nll(learner.model, data.heldout, pad) if data.heldout else None

    start = nll()
    end = start
    while step < loop.steps:
        began = time.perf_counter()
        batch = [
            data.train[i] for i in batch_indices(len(data.train), sft.batch_size, step, config.seed)
        ]
        if teacher is None:
            stats = learner.train_step(batch, [1.0] * len(batch))
        else:  # `sft.teacher`: the teacher's top tokens are the targets
            batch = asyncio.run(opd.with_top_tokens(batch, teacher, sft.teacher_top_k))
            stats = learner.train_step(batch, [sft.label_weight] * len(batch))
        step += 1
        metrics: dict[str, Any] = {
            "loss/total": stats.loss + stats.logit_kl,
            # With a teacher the KL is trained, and the data's NLL times `label_weight`.
            **(
                {"sft/train_nll": stats.policy_loss}
                if teacher is None
                else {"sft/logit_kl": stats.logit_kl, "sft/label_loss": stats.policy_loss}
            ),
            "optim/grad_norm": stats.grad_norm,
            "optim/lr": stats.lr,
            "tokens/trained": stats.tokens,
            "time/step_s": time.perf_counter() - began,
        }
        last = step == loop.steps
        if data.heldout and (last or (sft.eval_every and step % sft.eval_every == 0)):
            end = nll()
            metrics["sft/heldout_nll"] = end
        sinks.log(metrics, step)
        if last or (loop.checkpoint_every and step % loop.checkpoint_every == 0):
            checkpointer.save(CheckpointState(step, learner.state_dict(), {}, capture_rng()))
    summary = {
        "steps": step,
        "train_sequences": len(data.train),
        "heldout_sequences": len(data.heldout),
        "rows_left_out": data.dropped,
        "heldout_nll_start": start,
        "heldout_nll_end": end,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return SFTResult(step, start, end, run_dir)


# -- the command ---------------------------------------------------------------------------


def sft_command(
    config: str = typer.Argument(..., help="YAML config file ('-' for the defaults)."),
    overrides: list[str] = typer.Argument(None, help="key.path=value overrides, e.g. sft.data=F."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from the run's latest checkpoint (same config)."
    ),
    min_reward: float | None = typer.Option(
        None, "--min-reward", help="Leave out trajectories below this reward (sft.min_reward)."
    ),
) -> None:
    """Supervised training on trajectories or chat rows (`sft.data`), with the training
    config's model, LoRA, optimizer, steps and checkpoints; reports held-out NLL."""
    from rich.console import Console

    from skyrl_sdk.trainer.checkpoint import ResumeConfigError
    from skyrl_sdk.trainer.config import ConfigError, load_config
    from skyrl_sdk.trainer.init_from import InitFromError

    console = Console()
    try:
        extra = [] if min_reward is None else [f"sft.min_reward={min_reward}"]
        cfg = load_config(None if config == "-" else config, [*(overrides or []), *extra])
        result = train_sft(cfg, resume=resume, console=console)
    except (ConfigError, SFTDataError, ResumeConfigError, InitFromError, opd.TeacherError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if result.heldout_nll_start is not None:
        console.print(
            f"held-out NLL {result.heldout_nll_start:.4f} -> {result.heldout_nll_end:.4f} "
            f"after {result.steps} steps; checkpoints in {result.run_dir / 'checkpoints'}"
        )
    else:
        console.print(f"{result.steps} steps; checkpoints in {result.run_dir / 'checkpoints'}")
