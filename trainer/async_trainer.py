"""`AsyncTrainer`: generation and learning at the same time, with bounded staleness.

Generation workers (coroutines on one event loop) each take the next group index, play
`group_size` episodes of that group's task against the inference engine, and hand the finished
group to the learner. A worker may start a group only when the `StalenessGate` admits it, so
no sample lags the learner by more than `max_staleness` policy versions (0 = on-policy).

One training step, top to bottom (`AsyncTrainer.train`):

    1. wait for a batch: `groups_per_step` finished groups, oldest first; groups at their
       staleness limit are always included, so the bound holds for every sample
    2. advantages per group (GRPO / Dr.GRPO / RLOO) -> one advantage per TrainingSample;
       every token keeps the policy version that produced it
    3. learner.train_step in a worker thread (the event loop keeps generating meanwhile);
       truncated IS corrects tokens from older versions
    4. push the new weights to the engine without waiting for episodes in flight: the engine
       loads them between two decoding steps and tags later tokens with the new version
    5. open the gate one version further; mark the groups consumed; log; checkpoint

Everything runs in one process (engine thread + learner thread + event loop); with
`rollout.engine: vllm`, vLLM's engine core runs in a child process (`build_engine`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from rich.console import Console

import skyrl_gym
import skyrl_sdk.trainer.lookup_env  # noqa: F401  (registers the `lookup` env)
from skyrl_sdk.agents.local_engine import LocalEngine
from skyrl_sdk.agents.policy import Completion, GenerationContext, SamplingParams
from skyrl_sdk.agents.rollout import RolloutLimits, rollout
from skyrl_sdk.agents.trajectory import StopReason, TrainingSample, Trajectory, TrajectoryWriter
from skyrl_sdk.trainer import advantages as adv_fns
from skyrl_sdk.trainer.checkpoint import Checkpointer, CheckpointState, capture_rng, restore_rng
from skyrl_sdk.trainer.config import AdvantageEstimator, AlgorithmConfig, EngineKind, TrainConfig
from skyrl_sdk.trainer.data import DataCursor, StalenessGate
from skyrl_sdk.trainer.learner import Learner, LearnerStats
from skyrl_sdk.trainer.metrics import MultiSink, build_sinks, truncate_metrics
from skyrl_sdk.trainer.models import load_model

if TYPE_CHECKING:
    from skyrl_sdk.agents.vllm_engine import VLLMEngine


@dataclass(frozen=True)
class Group:
    """The finished episodes of one task (one GRPO group)."""

    index: int
    """Position in the run's data order (`DataCursor`)."""
    task_id: str
    """The task all episodes played."""
    admitted_version: int
    """Learner version when generation started (every token is at least this version)."""
    trajectories: tuple[Trajectory, ...]
    """The episodes, in sample order."""


@dataclass(frozen=True)
class TrainResult:
    """What a finished (or resumed and finished) run reports."""

    run_dir: Path
    """Where metrics, trajectories, checkpoints and the config are."""
    steps: int
    """Optimizer steps completed, over all resumes."""
    version: int
    """Final policy version."""
    history: tuple[dict[str, Any], ...]
    """Metrics of the steps run by this process."""
    resumed_from: int | None
    """Step of the checkpoint this process started from (None: fresh run)."""


class SeededPolicy:
    """Gives every (episode, turn) its own sampling seed, derived from the run seed.

    The agent loop reuses one `SamplingParams` for all turns; without this, each turn of an
    episode would replay the same random stream.
    """

    def __init__(self, engine: LocalEngine | VLLMEngine, seed: int):
        self.engine = engine
        self.seed = seed
        self.name = engine.name

    @property
    def renderer(self):
        return self.engine.renderer

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        if context is not None:
            key = f"{self.seed}:{context.episode_id}:{context.turn}".encode()
            sampling = replace(sampling, seed=zlib.crc32(key))
        return await self.engine.generate(prompt_token_ids, sampling, context=context)

    async def aclose(self) -> None:
        await self.engine.aclose()


class AsyncTrainer:
    """Trains a policy on an env with in-flight weight updates and bounded staleness."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        resume: bool = False,
        console: Console | None = None,
    ):
        self.config = config
        self.console = console or Console()
        self.run_dir = Path(config.out_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.resume = resume
        if config.trainer.torch_threads:
            torch.set_num_threads(config.trainer.torch_threads)
        seed_everything(config.seed)

        # Env and its task list; group i plays tasks[cursor.task_index(i)].
        probe = self._make_env()
        self.tasks: list[dict[str, Any]] = list(getattr(probe.unwrapped, "tasks", ()))
        probe.close()
        self.cursor = DataCursor(len(self.tasks), config.seed)

        # The learner trains one copy of the model; the engine samples from another.
        model, self.tokenizer = load_model(config.model, seed=config.seed)
        engine_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.learner = Learner(
            model,
            algorithm=config.algorithm,
            optim=config.optim,
            lora=config.model.lora,
            temperature=config.rollout.temperature,
            pad_token_id=self.tokenizer.pad_token_id or 0,
            total_steps=config.trainer.steps,
            micro_batch_size=config.trainer.micro_batch_size,
        )
        self.step = 0
        self.resumed_from: int | None = None
        self.checkpointer = Checkpointer(self.run_dir, keep=config.trainer.keep_checkpoints)
        if resume:
            self._restore()
        self.engine = build_engine(config, engine_model, self.tokenizer, self.run_dir)
        if self.learner.version != 0:
            self.engine.update_weights(self.learner.engine_weights(), self.learner.version)
            self.engine.wait_for_version(self.learner.version)
        self.policy = SeededPolicy(self.engine, config.seed)
        self.limits = RolloutLimits(
            max_turns=config.env.max_turns,
            max_tokens=config.rollout.max_tokens,
            max_context_tokens=config.rollout.max_context_tokens or self.engine.max_context_tokens,
        )
        self.sampling = sampling_params(config)
        self.sinks, self.writer = open_run_outputs(
            config, self.run_dir, self.resumed_from, self.console
        )
        # Generation state, shared by the workers and the learner loop (one event loop).
        self.gate = StalenessGate(
            config.trainer.groups_per_step,
            config.trainer.max_staleness,
            admitted=len(self.cursor.consumed),
            version=self.learner.version,
        )
        self._pending = self.cursor.pending()
        self._running: dict[int, int] = {}
        self._finished: dict[int, Group] = {}
        self._changed: asyncio.Condition | None = None
        self._error: BaseException | None = None

    # -- the training loop ----------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train to `trainer.steps` (blocking)."""
        return asyncio.run(self.train())

    async def train(self) -> TrainResult:
        """Train to `trainer.steps`; see the module docstring for one step."""
        cfg = self.config.trainer
        self._changed = asyncio.Condition()
        history: list[dict[str, Any]] = []
        workers = [
            asyncio.create_task(self._generation_worker(), name=f"gen-{i}")
            for i in range(cfg.groups_per_step * (cfg.max_staleness + 1))
        ]
        for w in workers:
            w.add_done_callback(self._worker_done)
        try:
            while self.step < cfg.steps:
                t_step = time.perf_counter()
                # 1. A batch of finished groups.
                groups = await self._next_batch()
                t_wait = time.perf_counter() - t_step
                # 2. Advantages, flattened to one per training sample.
                samples, advantages, adv_values = build_batch(groups, self.config.algorithm)
                # 3. Train off the event loop, so episodes keep running meanwhile.
                t0 = time.perf_counter()
                stats = await asyncio.to_thread(self.learner.train_step, samples, advantages)
                t_train = time.perf_counter() - t0
                # 4. In-flight weight update: queued for the engine, no waiting on episodes.
                t0 = time.perf_counter()
                weights = await asyncio.to_thread(self.learner.engine_weights)
                self.engine.update_weights(weights, self.learner.version)
                await self.gate.advance(self.learner.version)
                t_sync = time.perf_counter() - t0
                # 5. Bookkeeping.
                self.cursor.mark_consumed(g.index for g in groups)
                self.step += 1
                metrics = step_metrics(groups, stats, adv_values, self.learner.version)
                metrics.update(
                    {
                        "time/wait_s": t_wait,
                        "time/train_s": t_train,
                        "time/sync_s": t_sync,
                        "time/step_s": time.perf_counter() - t_step,
                    }
                )
                metrics["throughput/tokens_per_s"] = (
                    metrics["tokens/generated"] / metrics["time/step_s"]
                )
                self.sinks.log(metrics, self.step)
                history.append({"step": self.step, **metrics})
                if self.step == cfg.steps or (
                    cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
                ):
                    await asyncio.to_thread(self.save_checkpoint)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await self.engine.aclose()
            self.sinks.close()
            if self.writer is not None:
                self.writer.close()
        result = TrainResult(
            self.run_dir, self.step, self.learner.version, tuple(history), self.resumed_from
        )
        (self.run_dir / "summary.json").write_text(
            json.dumps(
                {
                    "steps": result.steps,
                    "version": result.version,
                    "resumed_from": result.resumed_from,
                }
            )
        )
        return result

    async def _next_batch(self) -> list[Group]:
        """`groups_per_step` finished groups, earliest admitted first (`pick_batch`). The
        learner waits while taking a batch now would leave a group (finished or running)
        unable to be trained within `max_staleness`."""
        assert self._changed is not None
        cfg = self.config.trainer
        chosen: list[int] | None = None

        def ready() -> bool:
            nonlocal chosen
            if self._error is not None:
                return True
            chosen = pick_batch(
                {i: g.admitted_version for i, g in self._finished.items()},
                self._running.values(),
                self.learner.version,
                cfg.groups_per_step,
                cfg.max_staleness,
            )
            return chosen is not None

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(ready), cfg.step_timeout_s)
            except TimeoutError:
                raise RuntimeError(
                    f"no batch after {cfg.step_timeout_s} s: {len(self._finished)} groups finished, "
                    f"{len(self._running)} running"
                ) from None
        if self._error is not None:
            raise RuntimeError("a generation worker failed") from self._error
        assert chosen is not None
        return [self._finished.pop(i) for i in chosen]

    # -- generation -----------------------------------------------------------------------

    async def _generation_worker(self) -> None:
        """Forever: wait for admission, play one group, hand it over."""
        assert self._changed is not None
        while True:
            version = await self.gate.admit()
            index = next(self._pending)  # no await since admit(): claims are in order
            self._running[index] = version
            task = self.tasks[self.cursor.task_index(index)]
            trajectories = await asyncio.gather(
                *(self._episode(index, k, task) for k in range(self.config.rollout.group_size))
            )
            group = Group(index, str(task.get("task_id", "")), version, tuple(trajectories))
            async with self._changed:
                del self._running[index]
                self._finished[index] = group
                self._changed.notify_all()

    async def _episode(self, index: int, k: int, task: dict[str, Any]) -> Trajectory:
        return await play_episode(self, index, k, task)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        self._error = task.exception()

        async def wake() -> None:
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(wake())

    def _make_env(self) -> Any:
        return make_env(self.config)

    # -- checkpoints ----------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """Save learner, data cursor, RNG and step (called between steps)."""
        state = CheckpointState(
            self.step, self.learner.state_dict(), self.cursor.state_dict(), capture_rng()
        )
        return self.checkpointer.save(state)

    def _restore(self) -> None:
        state = self.checkpointer.load()
        if state is None:
            self.console.print("[yellow]--resume: no checkpoint found; starting fresh[/yellow]")
            return
        self.learner.load_state_dict(state.learner)
        self.cursor.load_state_dict(state.cursor)
        restore_rng(state.rng)
        self.step = self.resumed_from = state.step
        self.console.print(
            f"resumed from step {state.step} (policy version {self.learner.version})"
        )


# -- the inference engine -----------------------------------------------------------------

ENGINE_MODEL_DIR = "engine_model"
"""Run subdirectory `engine: vllm` starts from: the initial model, its tokenizer in
`tokenizer/` (next to a Qwen2 `config.json`, transformers would reload the `lookup-tiny`
word-level tokenizer as a Qwen2 BPE one and mangle every text)."""


def build_engine(
    config: TrainConfig, model: Any, tokenizer: Any, run_dir: Path
) -> LocalEngine | VLLMEngine:
    """The inference engine `config.rollout.engine` names, at policy version 0 with the
    weights of `model` (the initial model; the trainer pushes the learner's from then on).

    `vllm` saves `model` and `tokenizer` under `run_dir / ENGINE_MODEL_DIR` and starts vLLM
    there. Its logprobs are taken after temperature (`processed_logprobs`), as `LocalEngine`
    reports them and the learner computes them; with `top_p` or `top_k` they are also
    renormalised over the kept tokens, where `LocalEngine`'s are not."""
    rollout = config.rollout
    name = f"{rollout.engine.value}:{config.model.source.value}"
    if rollout.engine is EngineKind.LOCAL:
        return LocalEngine(
            model, tokenizer, max_batch_size=rollout.engine_batch_size, name=name, policy_version=0
        )
    from skyrl_sdk.agents.vllm_engine import VLLMEngine  # imports vllm itself only when started

    path = run_dir / ENGINE_MODEL_DIR
    model.save_pretrained(path)
    tokenizer.save_pretrained(path / "tokenizer")
    engine_args: dict[str, Any] = {
        "tokenizer": str(path / "tokenizer"),
        "dtype": config.model.dtype,
        "seed": config.seed,
        "max_num_seqs": rollout.engine_batch_size,
        "enforce_eager": rollout.vllm_enforce_eager,
        "gpu_memory_utilization": rollout.vllm_gpu_memory_utilization,
        "logprobs_mode": "processed_logprobs",
    }
    if rollout.max_context_tokens:
        engine_args["max_model_len"] = rollout.max_context_tokens
    return VLLMEngine(path, name=name, policy_version=0, **engine_args)


# -- pure helpers (tested directly) -------------------------------------------------------


def make_env(config: TrainConfig) -> Any:
    """A fresh env of the run (`config.env`), as every episode gets."""
    cfg = config.env
    return skyrl_gym.make(cfg.id, max_turns=cfg.max_turns, **cfg.kwargs)


def sampling_params(config: TrainConfig) -> SamplingParams:
    """The sampling settings every turn of every episode uses."""
    rollout_cfg = config.rollout
    return SamplingParams(
        max_tokens=rollout_cfg.max_tokens,
        temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p,
    )


def open_run_outputs(
    config: TrainConfig, run_dir: Path, resumed_from: int | None, console: Console
) -> tuple[MultiSink, TrajectoryWriter | None]:
    """Write `config.yaml`, drop metrics past the resumed step, and open the metrics sinks and
    the trajectory file (None when `logging.trajectories` is off)."""
    (run_dir / "config.yaml").write_text(config.to_yaml())
    if resumed_from is not None:
        truncate_metrics(run_dir / "metrics.jsonl", resumed_from)
    sinks = build_sinks(config.logging, run_dir, config.model_dump(mode="json"), console)
    writer = (
        TrajectoryWriter(run_dir / "trajectories.jsonl") if config.logging.trajectories else None
    )
    return sinks, writer


async def play_episode(trainer: Any, index: int, k: int, task: dict[str, Any]) -> Trajectory:
    """Episode `k` of group `index` on a fresh env, recorded to the run's trajectory file.

    `trainer` is an `AsyncTrainer` or a `TinkerTrainer`: anything with `_make_env`, `policy`,
    `limits`, `sampling`, `config` and `writer`.
    """
    env = trainer._make_env()
    try:
        trajectory = await rollout(
            env,
            trainer.policy,
            task,
            limits=trainer.limits,
            sampling=trainer.sampling,
            episode_id=f"g{index}/{task.get('task_id', '')}#{k}",
            env_id=trainer.config.env.id,
        )
    finally:
        env.close()
    if trainer.writer is not None:
        trainer.writer.write(trajectory)
    return trajectory


def pick_batch(
    finished: Mapping[int, int],
    running: Iterable[int],
    version: int,
    groups_per_step: int,
    max_staleness: int,
) -> list[int] | None:
    """The groups to train at learner `version`, or None to wait for more to finish.

    `finished` maps group index -> admitted version; `running` holds the admitted versions of
    groups still generating. A group admitted at version u must be trained at version
    <= u + max_staleness. Finished groups are taken earliest admitted first, and only if every
    group left behind can still meet its bound in later steps: for k = 0..max_staleness, at
    most k * groups_per_step of them were admitted at versions <= version - max_staleness + k.
    (Taking fast young groups while several old ones still run would otherwise leave more
    overdue groups than one batch holds.) Admission control keeps this always reachable.
    """
    if len(finished) < groups_per_step:
        return None
    ordered = sorted(finished, key=lambda i: (finished[i], i))
    left = [finished[i] for i in ordered[groups_per_step:]] + list(running)
    for k in range(max_staleness + 1):
        limit = version - max_staleness + k
        if sum(v <= limit for v in left) > k * groups_per_step:
            return None
    return ordered[:groups_per_step]


def build_batch(
    groups: Sequence[Group], algorithm: AlgorithmConfig
) -> tuple[list[TrainingSample], list[float], list[float]]:
    """Samples with one advantage each, from finished groups.

    Returns (samples, advantage per sample, advantage per episode). Episodes without exact
    sampled ids (failed at reset, text-only) still count in their group's baseline but add no
    samples. With `filter_zero_variance`, groups whose rewards are all equal are left out
    (unless that would leave nothing).
    """
    rewards = torch.tensor(
        [[t.reward for t in g.trajectories] for g in groups], dtype=torch.float64
    )
    if algorithm.advantage is AdvantageEstimator.RLOO:
        adv = adv_fns.rloo_advantages(rewards)
    else:
        adv = adv_fns.grpo_advantages(
            rewards, normalize_std=algorithm.advantage is AdvantageEstimator.GRPO
        )
    keep = [True] * len(groups)
    if algorithm.filter_zero_variance:
        mask = adv_fns.nonzero_variance_groups(rewards).tolist()
        if any(mask):
            keep = mask
    samples: list[TrainingSample] = []
    per_sample: list[float] = []
    per_episode: list[float] = []
    for g, row, kept in zip(groups, adv.tolist(), keep, strict=True):
        per_episode.extend(row)
        if not kept:
            continue
        for trajectory, a in zip(g.trajectories, row, strict=True):
            if not trajectory.trainable:
                continue
            for sample in trajectory.training_samples():
                if any(sample.loss_mask):
                    samples.append(sample)
                    per_sample.append(float(a))
    if not samples:
        raise RuntimeError(
            "no trainable samples in this batch (every episode failed or was text-only)"
        )
    return samples, per_sample, per_episode


def step_metrics(
    groups: Sequence[Group], stats: LearnerStats, advantages: Sequence[float], version: int
) -> dict[str, Any]:
    """Flat metrics of one step from its groups and the learner's stats."""
    episodes = [t for g in groups for t in g.trajectories]
    n = max(len(episodes), 1)
    rewards = [t.reward for t in episodes]
    adv = torch.tensor(list(advantages) or [0.0], dtype=torch.float64)
    stops = Counter(t.stop_reason for t in episodes)
    out: dict[str, Any] = {
        "version": version,
        "reward/mean": sum(rewards) / n,
        "reward/min": min(rewards, default=0.0),
        "reward/max": max(rewards, default=0.0),
        "success/rate": sum(t.success for t in episodes) / n,
        "advantage/mean": float(adv.mean()),
        "advantage/abs_mean": float(adv.abs().mean()),
        "advantage/std": float(adv.std()) if adv.numel() > 1 else 0.0,
        "loss/total": stats.loss,
        "loss/policy": stats.policy_loss,
        "policy/kl_ref": stats.kl_ref,
        "policy/kl_sampler": stats.kl_sampler,
        "policy/entropy": stats.entropy,
        "policy/clip_fraction": stats.clip_fraction,
        "policy/tis_clip_fraction": stats.tis_clip_fraction,
        "policy/ratio_mean": stats.ratio_mean,
        "optim/grad_norm": stats.grad_norm,
        "optim/lr": stats.lr,
        "staleness/mean": stats.staleness_mean,
        "staleness/max": stats.staleness_max,
        "tokens/generated": sum(t.num_generated_tokens for t in episodes),
        "tokens/trained": stats.tokens,
        "throughput/train_tokens_per_s": stats.tokens / max(stats.duration_s, 1e-9),
        "episode/turns": sum(len(t.turns) for t in episodes) / n,
        "episode/parse_errors": sum(t.parse_errors for t in episodes) / n,
        "episode/duration_s": sum(t.duration_s for t in episodes) / n,
        "time/gen_s": sum(turn.llm_s for t in episodes for turn in t.turns),
        "time/env_s": sum(turn.env_s for t in episodes for turn in t.turns),
        "groups": [g.index for g in groups],
        "tasks": [g.task_id for g in groups],
    }
    for reason in StopReason:
        out[f"stop/{reason.value}"] = stops.get(reason, 0) / n
    return out


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
