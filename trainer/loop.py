"""The RL loop every backend runs, with the learner and the inference engine passed in.

Generation workers (coroutines on one event loop) each take the next group index, play
`group_size` episodes of that group's task against the engine, and hand the finished group to
the learner. A group's task is a row of the env's tasks (`env.tasks=PATH`, or the env's own),
in a seeded order per epoch (`DataCursor`); an env without tasks (the Gymnasium way: its state
drawn from the seed) is played by seeds instead, each group on one seed row `seed-<n>` from
`SeedStream`, below `heldout.seed_offset` where held-out seeds start. A worker may start a group only when the `StalenessGate` admits it, so no sample
lags the learner by more than `max_staleness` policy versions (0 = synchronous on-policy).

One training step, top to bottom (`TrainingLoop.train`):

    1. wait for a batch: `groups_per_step` finished groups, oldest first; groups at their
       staleness limit are always included, so the bound holds for every sample
    2. advantages per group (GRPO / Dr.GRPO / RLOO) -> one advantage per TrainingSample;
       every token keeps the policy version that produced it
    3. `learner.train_step` in a worker thread (the event loop keeps generating meanwhile);
       truncated IS corrects tokens from older versions
    4. publish: `learner.engine_weights()` -> `engine.update_weights(weights, version)`, without
       waiting for episodes in flight (a local engine loads them between two decoding steps and
       tags later tokens with the new version); then open the gate one version
       further (except after the last step)
    5. mark the groups consumed; held-out evaluation when due (`trainer.heldout`: before
       the first step, every `every_steps`, after the last; no weights are published while
       it runs); log metrics; checkpoint; at the end write `summary.json`

The backends differ only in what `learner` (`PolicyLearner`) and `engine` (`PolicyEngine`) are:

- `AsyncTrainer`: a torch `Learner` in this process; a `LocalEngine` thread or `VLLMEngine`.
- `RayTrainer` (`--ray`): `RayLearner` (one actor) or `RayDataParallelLearner` (FSDP2 /
  DeepSpeed ranks); `RayEngine` (engine actors); optionally env actors (`make_env`).
- `TinkerTrainer`: `TinkerLearner` (forward_backward + optim_step on a Tinker endpoint);
  `TinkerEngine` (sampling clients of the weights it saves for sampling).

Each backend's constructor builds its parts, restores a checkpoint with `_load_checkpoint` /
`_resume_at`, and opens the run's outputs; `train` is this module's, unchanged.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import random
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape

import skyrl_gym
from skyrl_gym.registry import EntryPointError, UnknownEnvError
from skyrl_gym.tasks import TaskError, TaskRow, load_tasks, seed_task, to_task_rows, validate_task
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.command_agent import CommandAgentRunner
from skyrl_sdk.agents.policy import Completion, GenerationContext, Policy, SamplingParams
from skyrl_sdk.agents.rollout import RolloutLimits, rollout
from skyrl_sdk.agents.trajectory import StopReason, TrainingSample, Trajectory, TrajectoryWriter
from skyrl_sdk.trainer import advantages as adv_fns
from skyrl_sdk.trainer import heldout
from skyrl_sdk.trainer.checkpoint import (
    Checkpointer,
    CheckpointState,
    ResumeConfigError,
    capture_rng,
    check_resume_config,
    restore_rng,
)
from skyrl_sdk.trainer.config import AdvantageEstimator, AlgorithmConfig, ConfigError, TrainConfig
from skyrl_sdk.trainer.data import DataCursor, StalenessGate
from skyrl_sdk.trainer.learner import LearnerStats
from skyrl_sdk.trainer.metrics import MultiSink, build_sinks, truncate_metrics

# -- what the loop needs of its backends ------------------------------------------------------


class PolicyLearner(Protocol):
    """What the loop trains: a torch `Learner`, an FSDP2 / DeepSpeed learner, Ray learner
    actors, or a Tinker endpoint. Called from a worker thread, one call at a time."""

    @property
    def version(self) -> int:
        """Policy version of the current weights (one more per `train_step`)."""
        ...

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """One optimizer step on `samples` (one advantage each)."""
        ...

    def engine_weights(self) -> Any:
        """The current weights in the form the engine's `update_weights` takes (tensors, a
        Ray object reference, a tinker:// sampler path)."""
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """What a checkpoint stores to resume this learner exactly."""
        ...


class PolicyEngine(Protocol):
    """What the loop samples from: `LocalEngine`, `VLLMEngine`, Ray engine actors, a Tinker
    sampling client."""

    name: str
    """Recorded as every trajectory's `policy`."""
    policy_version: int
    """Version of the weights the engine serves (or has queued, for actors)."""

    @property
    def renderer(self) -> ChatRenderer:
        """The chat template the engine's tokenizer uses."""
        ...

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        """One completion of `prompt_token_ids`."""
        ...

    def update_weights(self, weights: Any, version: int) -> None:
        """Serve `weights` (from `PolicyLearner.engine_weights`) as `version` from now on;
        episodes in flight continue (tokens decoded later carry the new version)."""
        ...

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """Block until weights of at least `version` are served; False on timeout."""
        ...

    async def aclose(self) -> None:
        """Release what the engine holds (called once, when training ends)."""
        ...


class RunOutcome(enum.Enum):
    """How `train` ended (a backend may report it, e.g. to close a remote session)."""

    SUCCESS = "success"
    ERRORED = "errored"
    INTERRUPTED = "interrupted"


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

    def __init__(self, engine: PolicyEngine, seed: int):
        self.engine = engine
        self.seed = seed
        self.name = engine.name

    @property
    def renderer(self) -> ChatRenderer:
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


# -- the loop ---------------------------------------------------------------------------------


class TrainingLoop:
    """The run state and the RL loop; backends (`AsyncTrainer`, `RayTrainer`,
    `TinkerTrainer`) are constructors that set `learner`, `engine`, `policy` and `limits`.

    Those four are read when `train` starts, so a caller may put its own in their place
    before (a latency-injecting policy in `skyrl bench async`, device parts in `gpu_check`).
    """

    learner: PolicyLearner
    """Trains the policy and hands out its weights."""
    engine: PolicyEngine
    """Samples episodes; receives the learner's weights after every step."""
    policy: Policy
    """What episodes sample from (the engine, with per-turn seeds: `SeededPolicy`)."""
    limits: RolloutLimits
    """Turn and token limits of every episode."""
    sinks: MultiSink
    """Where metrics go (`_open_outputs`)."""
    writer: TrajectoryWriter | None
    """Where trajectories go (None: `logging.trajectories` is off)."""
    command_agent: CommandAgentRunner | None = None
    """Plays every episode instead of `rollout` when `agent.spec` is `command:CMD` (set by
    `train`: an external program in the episode's sandbox, against `policy` served over
    OpenAI's API; its captured tokens are the trajectory)."""

    def __init__(
        self, config: TrainConfig, *, resume: bool = False, console: Console | None = None
    ):
        """Set up the loop's own state; with `resume`, first refuse (`ResumeConfigError`,
        naming the differences) to continue a checkpointed run under another config, before
        any backend loads a model."""
        self.config = config
        self.console = console or Console()
        self.run_dir = Path(config.out_dir)
        self.resume = resume
        require_env_id(config)
        if resume:
            check_resume_config(self.run_dir, config.model_dump(mode="json"))
        seed_everything(config.seed)
        self.env_kwargs: dict[str, Any] = resolve_env_kwargs(config)
        """What every env of the run is built with: `env.kwargs`, with the rows of
        `env.tasks` (or of a path in `env.kwargs.tasks`) read once."""
        # The env's task list; group i plays tasks[cursor.task_index(i)]. An env without
        # one is played by seeds: group i plays `seed_task(seeds.seed(i))`.
        self.tasks: list[dict[str, Any]] = probe_tasks(config, self.env_kwargs)
        self.seeds: SeedStream | None = (
            None if self.tasks else SeedStream(config.seed, config.heldout.seed_offset)
        )
        """The seed of each group when the env has no tasks (None: it has tasks)."""
        self.heldout_tasks: list[dict[str, Any]] | None = (
            None
            if config.heldout.env_kwargs is None
            else heldout.heldout_tasks(config, self.env_kwargs)
        )
        """The episodes of every held-out evaluation (None: held-out evaluation is off)."""
        self.cursor = DataCursor(len(self.tasks) or 1, config.seed)
        self.step = 0
        self.resumed_from: int | None = None
        self.checkpointer = Checkpointer(self.run_dir, keep=config.trainer.keep_checkpoints)
        self._check_task_ids()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.sampling = sampling_params(config)
        self._flat_steps = 0
        """Steps whose groups all had rewards without variance (no learning signal)."""
        self._tokens_checked = False
        """Whether the first episode's prompt was checked for unknown tokens."""

    def task_for_group(self, index: int) -> TaskRow:
        """The task row group `index` plays: a row of the env's tasks, or a seed row."""
        if self.seeds is not None:
            return seed_task(self.seeds.seed(index))
        return self.tasks[self.cursor.task_index(index)]

    def _check_task_ids(self) -> None:
        """Record which tasks the run trains on (`TASK_IDS_FILE`); under `--resume` with a
        checkpoint, refuse (`ResumeConfigError`) when they changed since, as the same config
        over an edited rows file would train other tasks under the same group indices."""
        now = task_ids_record(self.tasks, self.seeds)
        path = self.run_dir / TASK_IDS_FILE
        if self.resume and path.exists() and self.checkpointer.latest() is not None:
            try:
                before = json.loads(path.read_text())
            except (OSError, ValueError):
                before = None
            if before != now:
                was = (before or {}).get("description", "unknown")
                raise ResumeConfigError(
                    f"--resume: the run's tasks changed since its checkpoint (was {was}, now "
                    f"{now['description']}): resume with the same rows, or train in a new out_dir"
                )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(now))

    def make_env(self) -> Any:
        """A fresh env for one episode (Ray mode leases one from its env actors instead)."""
        return make_env(self.config, self.env_kwargs)

    def run(self) -> TrainResult:
        """Train to `trainer.steps` (blocking)."""
        return asyncio.run(self.train())

    async def train(self) -> TrainResult:
        """Train to `trainer.steps`; see the module docstring for one step."""
        cfg = self.config.trainer
        self._start_generation()
        self.command_agent = CommandAgentRunner.for_training(
            self.config.agent, self.policy, self.run_dir
        )
        history: list[dict[str, Any]] = []
        workers: list[asyncio.Task[None]] = []
        outcome = RunOutcome.ERRORED
        evaluator = self._heldout_evaluator()
        try:
            # The engine serves the learner's weights before the first episode starts.
            if self.engine.policy_version != self.learner.version:
                await self._publish()
            if evaluator is not None and self.resumed_from is None:
                await self._evaluate_heldout(evaluator)  # the untrained policy
            workers = [
                asyncio.create_task(self._generation_worker(), name=f"gen-{i}")
                for i in range(cfg.groups_per_step * (cfg.max_staleness + 1))
            ]
            for w in workers:
                w.add_done_callback(self._worker_done)
            while self.step < cfg.steps:
                t_step = time.perf_counter()
                # 1. A batch of finished groups.
                groups = await self._next_batch()
                t_wait = time.perf_counter() - t_step
                # 2. Advantages, flattened to one per training sample.
                samples, advantages, adv_values = build_batch(groups, self.config.algorithm)
                flat = flat_groups(groups)
                if len(flat) == len(groups):
                    self._no_signal(flat)
                # 3. Train off the event loop, so episodes keep running meanwhile.
                t0 = time.perf_counter()
                stats = await asyncio.to_thread(self.learner.train_step, samples, advantages)
                t_train = time.perf_counter() - t0
                # 4. Publish: queued for the engine, no waiting on episodes in flight.
                t0 = time.perf_counter()
                await self._publish()
                if self.step + 1 < cfg.steps:  # admit no group that no batch will train
                    await self._gate.advance(self.learner.version)
                t_sync = time.perf_counter() - t0
                # 5. Bookkeeping.
                self.cursor.mark_consumed(g.index for g in groups)
                self.step += 1
                metrics = step_metrics(groups, stats, adv_values, self.learner.version)
                metrics["groups/no_variance"] = len(flat)
                self._backend_metrics(metrics)
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
                # Held-out episodes at the version just published (none is published
                # until they finish), outside the step's timings.
                last = self.step == cfg.steps
                if evaluator is not None and evaluator.due(self.step, last=last):
                    metrics.update(await self._evaluate_heldout(evaluator))
                self.sinks.log(metrics, self.step)
                history.append({"step": self.step, **metrics})
                if self.step == cfg.steps or (
                    cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
                ):
                    await asyncio.to_thread(self.save_checkpoint)
            # The run ends with the engine serving the final weights (no episode after the
            # last step makes a local engine load them on its own).
            version = self.learner.version
            if not await asyncio.to_thread(self.engine.wait_for_version, version):
                raise RuntimeError(f"the engine did not load the final weights (version {version})")
            outcome = RunOutcome.SUCCESS
        except (KeyboardInterrupt, asyncio.CancelledError):
            outcome = RunOutcome.INTERRUPTED
            raise
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if self.command_agent is not None:
                self.command_agent.close()
            await self.engine.aclose()
            self.sinks.close()
            if self.writer is not None:
                self.writer.close()
            await self._finish(outcome)
        result = TrainResult(
            self.run_dir, self.step, self.learner.version, tuple(history), self.resumed_from
        )
        (self.run_dir / "summary.json").write_text(json.dumps(self._summary(result)))
        return result

    def _no_signal(self, flat: Sequence[float]) -> None:
        """Count a step whose every group had equal rewards; say so the first time."""
        self._flat_steps += 1
        if self._flat_steps > 1:
            return
        counts = Counter(flat)
        kinds = ", ".join(
            f"{n} all {value:g}" for value, n in sorted(counts.items(), key=lambda kv: kv[0])
        )
        self.console.print(
            f"[yellow]warning: step {self.step + 1}: no learning signal: in all {len(flat)} "
            f"groups every episode got the same reward ({kinds}), so every advantage is 0. "
            "Said once; the metric groups/no_variance counts such groups per step.[/yellow]",
            soft_wrap=True,
        )

    def _check_prompt_tokens(self, trajectory: Trajectory) -> None:
        """Warn once when most of the env's opening text is unknown to the tokenizer (a
        word-level vocabulary, e.g. `lookup-tiny`'s, on another env's text)."""
        if not trajectory.prompt_messages:
            return  # failed at reset: check the next group's opening
        self._tokens_checked = True
        tokenizer = getattr(getattr(self.engine, "renderer", None), "tokenizer", None)
        unknown, total = unknown_tokens(tokenizer, trajectory.prompt_messages)
        if total and unknown * 2 > total:
            token = getattr(tokenizer, "unk_token", None) or "unknown"
            self.console.print(
                f"[yellow]warning: {unknown} of the {total} tokens of env "
                f"{escape(repr(self.config.env.id))}'s opening messages ({unknown / total:.0%}) are "
                f"unknown to the tokenizer of model.source={self.config.model.source.value} "
                f"(it reads them as {token}): the policy cannot read the task. Choose a "
                "tokenizer that covers the env's text (model.source=tiny is byte-level)."
                "[/yellow]",
                soft_wrap=True,
            )

    def _heldout_evaluator(self) -> heldout.HeldoutEvaluator | None:
        """The run's held-out evaluator (None when `heldout.env_kwargs` is not set)."""
        if self.heldout_tasks is None:
            return None
        return heldout.HeldoutEvaluator(
            self.config,
            self.run_dir,
            self.sampling,
            self.limits,
            tasks=self.heldout_tasks,
            env_kwargs=heldout.heldout_env_kwargs(self.config, self.env_kwargs),
        )

    async def _evaluate_heldout(self, evaluator: heldout.HeldoutEvaluator) -> dict[str, float]:
        """Evaluate the learner's current version on the held-out tasks; its metrics."""
        version = self.learner.version
        if not await asyncio.to_thread(self.engine.wait_for_version, version):
            raise RuntimeError(f"the engine did not load version {version} for held-out episodes")
        t0 = time.perf_counter()
        result = await evaluator.evaluate(self.policy, step=self.step, version=version)
        self.console.print(
            f"held-out after step {self.step}: success {result.success:.1%} "
            f"[{result.ci_low:.1%}, {result.ci_high:.1%}] over {result.episodes} episodes"
        )
        return {
            "heldout/success": result.success,
            "heldout/ci_low": result.ci_low,
            "heldout/ci_high": result.ci_high,
            "heldout/reward_mean": result.reward_mean,
            "time/heldout_s": time.perf_counter() - t0,
        }

    async def _publish(self) -> None:
        """Hand the learner's current weights to the engine."""
        weights = await asyncio.to_thread(self.learner.engine_weights)
        self.engine.update_weights(weights, self.learner.version)

    async def _next_batch(self) -> list[Group]:
        """`groups_per_step` finished groups, earliest admitted first (`pick_batch`). The
        learner waits while taking a batch now would leave a group (finished or running)
        unable to be trained within `max_staleness`."""
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

    def _start_generation(self) -> None:
        """Generation state, shared by the workers and the learner loop (one event loop)."""
        cfg = self.config.trainer
        self._gate = StalenessGate(
            cfg.groups_per_step,
            cfg.max_staleness,
            admitted=len(self.cursor.consumed),
            version=self.learner.version,
        )
        self._pending = self.cursor.pending()
        self._running: dict[int, int] = {}
        self._finished: dict[int, Group] = {}
        self._changed = asyncio.Condition()
        self._error: BaseException | None = None

    async def _generation_worker(self) -> None:
        """Forever: wait for admission, play one group, hand it over."""
        while True:
            version = await self._gate.admit()
            index = next(self._pending)  # no await since admit(): claims are in order
            self._running[index] = version
            task = self.task_for_group(index)
            trajectories = await asyncio.gather(
                *(self.play_episode(index, k, task) for k in range(self.config.rollout.group_size))
            )
            if not self._tokens_checked:
                self._check_prompt_tokens(trajectories[0])
            group = Group(index, str(task.get("task_id", "")), version, tuple(trajectories))
            async with self._changed:
                del self._running[index]
                self._finished[index] = group
                self._changed.notify_all()

    async def play_episode(self, index: int, k: int, task: dict[str, Any]) -> Trajectory:
        """Episode `k` of group `index` on a fresh env, recorded to the run's trajectory file."""
        env = self.make_env()
        episode_id = f"g{index}/{task.get('task_id', '')}#{k}"
        try:
            if self.command_agent is not None:
                trajectory = await self.command_agent.run(
                    env, task, episode_id=episode_id, env_id=self.config.env.id
                )
            else:
                trajectory = await rollout(
                    env,
                    self.policy,
                    task,
                    limits=self.limits,
                    sampling=self.sampling,
                    episode_id=episode_id,
                    env_id=self.config.env.id,
                )
        finally:
            env.close()
        if self.writer is not None:
            self.writer.write(trajectory)
        return trajectory

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        self._error = task.exception()

        async def wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(wake())

    # -- run outputs and checkpoints ------------------------------------------------------

    def _open_outputs(self) -> None:
        """Open the metrics sinks and trajectory file (after any resume: `resumed_from`)."""
        self.sinks, self.writer = open_run_outputs(
            self.config, self.run_dir, self.resumed_from, self.console
        )

    def save_checkpoint(self) -> Path:
        """Save learner, data cursor, RNG and step (called between steps)."""
        state = CheckpointState(
            self.step, dict(self.learner.state_dict()), self.cursor.state_dict(), capture_rng()
        )
        return self.checkpointer.save(state)

    def _load_checkpoint(self) -> CheckpointState | None:
        """The run's latest checkpoint, for `--resume` (None, with a notice: start fresh)."""
        state = self.checkpointer.load()
        if state is None:
            self.console.print("[yellow]--resume: no checkpoint found; starting fresh[/yellow]")
        return state

    def _resume_at(self, state: CheckpointState, detail: str) -> None:
        """Continue from `state`'s step, data position and RNG (the backend has restored its
        learner from `state.learner`)."""
        self.cursor.load_state_dict(state.cursor)
        restore_rng(state.rng)
        self.step = self.resumed_from = state.step
        self.console.print(f"resumed from step {state.step} ({detail})")

    # -- what a backend may add -----------------------------------------------------------

    def _backend_metrics(self, metrics: dict[str, Any]) -> None:
        """Add the backend's own metrics of the step just trained, drop those it lacks."""

    def _summary(self, result: TrainResult) -> dict[str, Any]:
        """What `summary.json` holds (with held-out success before and after training, from
        `heldout.jsonl`, when the run evaluates on held-out tasks)."""
        summary: dict[str, Any] = {
            "steps": result.steps,
            "version": result.version,
            "resumed_from": result.resumed_from,
        }
        evaluations = heldout.read_results(self.run_dir)
        if evaluations:
            summary["heldout_success_start"] = evaluations[0].success
            summary["heldout_success_end"] = evaluations[-1].success
            summary["heldout_episodes"] = evaluations[-1].episodes
        return summary

    async def _finish(self, outcome: RunOutcome) -> None:
        """Called once when `train` ends, after the engine and outputs are closed."""


# -- pure helpers (tested directly) -------------------------------------------------------


TASK_IDS_FILE = "task_ids.json"
"""In the run directory: which tasks the run trains on (a digest of the task ids, or the seed
stream), so `--resume` can refuse a run whose rows changed."""
TASKS_FIELD = "tasks"
"""The constructor argument that takes an env's task rows."""


def require_env_id(config: TrainConfig) -> str:
    """`env.id`, or a `ConfigError` saying it is missing (it has no default)."""
    if not config.env.id:
        raise ConfigError(
            "env.id: missing: name the env to train on, a registered id (`skyrl env list`) "
            "or an entry point 'module:Class', e.g. env.id=lookup"
        )
    return config.env.id


def read_task_rows(value: Any, field: str) -> list[TaskRow]:
    """Task rows from a JSONL / parquet path or a list of rows, validated once
    (`skyrl_gym.tasks`); a `ConfigError` naming `field` for a bad file or row."""
    try:
        if isinstance(value, str | Path):
            rows = load_tasks(value)
            if not rows:
                raise TaskError(f"{value}: holds no task rows")
        else:
            rows = to_task_rows(enumerate(value), where="row ")
    except TaskError as e:
        raise ConfigError(f"{field}: {e}") from None
    return rows


def resolve_env_kwargs(config: TrainConfig) -> dict[str, Any]:
    """`env.kwargs` as every env of the run gets it: the rows of `env.tasks`, or of a path
    string in `env.kwargs.tasks`, read and validated here, once, as its `tasks`."""
    cfg = config.env
    kwargs = dict(cfg.kwargs)
    if cfg.tasks is not None:
        kwargs[TASKS_FIELD] = read_task_rows(cfg.tasks, "env.tasks")
    elif isinstance(kwargs.get(TASKS_FIELD), str | list | tuple):
        # A path here used to reach the env as a string (a list of characters to a TaskEnv).
        kwargs[TASKS_FIELD] = read_task_rows(kwargs[TASKS_FIELD], "env.kwargs.tasks")
    return kwargs


def tasks_field(config: TrainConfig) -> str | None:
    """The config field the run's task rows are given in (None: the env's own)."""
    if config.env.tasks is not None:
        return "env.tasks"
    if isinstance(config.env.kwargs.get(TASKS_FIELD), str | list | tuple):
        return "env.kwargs.tasks"
    return None


_GYM_DIR = Path(skyrl_gym.__file__).resolve().parent


def _raised_calling(error: BaseException) -> bool:
    """Whether `error` was raised by the call into the env's constructor itself (its
    arguments did not bind), not from inside it: the innermost frame is skyrl_gym's
    `make` (or its SkyRL adapter), not the env's code."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    return path.is_relative_to(_GYM_DIR) and not path.is_relative_to(_GYM_DIR / "envs")


def build_env(
    env_id: str, max_turns: int, kwargs: Mapping[str, Any], field: str = "env.kwargs"
) -> Any:
    """`skyrl_gym.make` for a probe: an env that rejects its arguments (no `tasks`
    parameter, an unknown keyword) is a `ConfigError` naming `field`, not a traceback."""
    try:
        return skyrl_gym.make(env_id, max_turns=max_turns, **kwargs)
    except (UnknownEnvError, EntryPointError) as e:
        raise ConfigError(f"env.id: {e}") from None
    except TypeError as e:
        text = str(e)
        if not _raised_calling(e):
            raise  # the env's own bug: keep the traceback
        if (
            TASKS_FIELD in kwargs
            and field != "env.kwargs"
            and (f"'{TASKS_FIELD}'" in text or "takes no arguments" in text)
        ):
            raise ConfigError(
                f"{field}: env {env_id!r} takes no task rows (its constructor has no "
                f"'{TASKS_FIELD}' argument): it is played by seeds, drop the rows"
            ) from None
        raise ConfigError(f"{field}: env {env_id!r} rejects its arguments ({text})") from None


def probe_tasks(config: TrainConfig, env_kwargs: Mapping[str, Any]) -> list[TaskRow]:
    """The task rows of the run's env (empty: it is played by seeds), from one probe env.

    Rows given in the config are checked against the env's `required_fields`; an env that
    takes rows but has none (a `TaskEnv` without a dataset) is a `ConfigError`, since it
    cannot start an episode from a seed.
    """
    env_id = require_env_id(config)
    given = tasks_field(config)
    field = given or "env.kwargs"
    probe = build_env(env_id, config.env.max_turns, env_kwargs, field)
    try:
        env = probe.unwrapped
        tasks = list(getattr(env, "tasks", None) or ())
        required = tuple(getattr(env, "required_fields", ()))
        if given and required:
            try:
                for row in tasks:
                    validate_task(row, required, f"env {env_id!r}")
            except TaskError as e:
                raise ConfigError(f"{field}: {e}") from None
        if not tasks and hasattr(env, TASKS_FIELD):
            raise ConfigError(
                f"env.tasks: env {env_id!r} plays task rows and has none: give it a JSONL "
                "or parquet file of rows, env.tasks=PATH"
            )
    finally:
        probe.close()
    return tasks


class SeedStream:
    """The seed each group plays when the env has no tasks: group `i`'s is drawn from a
    generator seeded with (run seed, `i`) alone, below `limit` (`heldout.seed_offset`, where
    held-out seeds start), so a resumed run replays every group's seed exactly."""

    def __init__(self, seed: int, limit: int):
        self.run_seed = seed
        """The run's `seed`."""
        self.limit = limit
        """Seeds are in `[0, limit)`."""

    def seed(self, group: int) -> int:
        """The seed of group `group`."""
        return random.Random(f"{self.run_seed}:seed-stream:{group}").randrange(self.limit)


def task_ids_record(tasks: Sequence[TaskRow], seeds: SeedStream | None) -> dict[str, Any]:
    """What `TASK_IDS_FILE` holds: the task ids' digest (in order), or the seed stream."""
    if seeds is not None:
        return {
            "description": f"seeds below {seeds.limit} drawn with run seed {seeds.run_seed}",
            "seeds": [seeds.run_seed, seeds.limit],
        }
    digest = hashlib.sha256("\n".join(str(t.get("task_id", "")) for t in tasks).encode())
    return {
        "description": f"{len(tasks)} tasks, ids digest {digest.hexdigest()[:12]}",
        "tasks": len(tasks),
        "sha256": digest.hexdigest(),
    }


def unknown_tokens(tokenizer: Any, messages: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(unknown, total) tokens of the messages' text contents under `tokenizer` (0, 0 when
    it has no unknown token: byte-level tokenizers read every text)."""
    unk = _unknown_id(tokenizer)
    if unk is None:
        return 0, 0
    unknown = total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and content:
            ids = tokenizer.encode(content, add_special_tokens=False)
            total += len(ids)
            unknown += sum(i == unk for i in ids)
    return unknown, total


def _unknown_id(tokenizer: Any) -> int | None:
    """The id the tokenizer gives text it cannot read (None: it reads every text). The Rust
    model's own unknown token decides where there is one: a byte-level BPE has none even when
    transformers names an `unk_token`, and a word-level one may have one transformers lacks."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    if model is not None and hasattr(model, "unk_token"):
        token = model.unk_token
        return None if token is None else backend.token_to_id(token)
    return getattr(tokenizer, "unk_token_id", None)


def flat_groups(groups: Sequence[Group]) -> list[float]:
    """The shared reward of each group whose episodes all got the same one (a group without
    reward variance has zero advantage everywhere)."""
    out = []
    for g in groups:
        rewards = {t.reward for t in g.trajectories}
        if len(rewards) == 1:
            out.append(rewards.pop())
    return out


def make_env(config: TrainConfig, kwargs: Mapping[str, Any] | None = None) -> Any:
    """A fresh env of the run (`config.env`), as every episode gets; `kwargs` replaces
    `env.kwargs` (the loop passes its `env_kwargs`, with the task rows read once)."""
    cfg = config.env
    env_id = require_env_id(config)
    return skyrl_gym.make(
        env_id, max_turns=cfg.max_turns, **(cfg.kwargs if kwargs is None else kwargs)
    )


def sampling_params(config: TrainConfig) -> SamplingParams:
    """The sampling settings every turn of every episode uses."""
    rollout_cfg = config.rollout
    return SamplingParams(
        max_tokens=rollout_cfg.max_tokens,
        temperature=rollout_cfg.temperature,
        top_p=rollout_cfg.top_p,
    )


def rollout_limits(config: TrainConfig, engine_context: int | None) -> RolloutLimits:
    """Turn and token limits of every episode; the context defaults to the engine's."""
    return RolloutLimits(
        max_turns=config.env.max_turns,
        max_tokens=config.rollout.max_tokens,
        max_context_tokens=config.rollout.max_context_tokens or engine_context,
    )


def open_run_outputs(
    config: TrainConfig, run_dir: Path, resumed_from: int | None, console: Console
) -> tuple[MultiSink, TrajectoryWriter | None]:
    """Write `config.yaml`, drop metrics past the resumed step, and open the metrics sinks and
    the trajectory file (None when `logging.trajectories` is off)."""
    (run_dir / "config.yaml").write_text(config.to_yaml())
    if resumed_from is not None:
        truncate_metrics(run_dir / "metrics.jsonl", resumed_from)
        heldout.truncate_results(run_dir, resumed_from)
    else:
        heldout.clear(run_dir)  # a fresh run in a used directory
    sinks = build_sinks(config.logging, run_dir, config.model_dump(mode="json"), console)
    writer = (
        TrajectoryWriter(run_dir / "trajectories.jsonl") if config.logging.trajectories else None
    )
    return sinks, writer


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
        failed = next((t for g in groups for t in g.trajectories if t.error), None)
        why = f"; the first error: {failed.stop_reason.value}: {failed.error}" if failed else ""
        raise RuntimeError(
            f"no trainable samples in this batch (every episode failed or was text-only{why})"
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
