"""The RL loop every backend runs, assembled from the learner and the inference engine.

`TrainingLoop(config, learner, engine, run=..., limits=..., hooks=...)` is built from its parts;
a backend (`trainer.backends`: `local`, `ray`, `tinker`) builds them once, and `AsyncTrainer`,
`RayTrainer` and `TinkerTrainer` are constructors that do exactly that.

Generation workers (`trainer.generation`: coroutines on one event loop) each take the next
group index, play `group_size` episodes of that group's task against the engine, and hand the
finished group to the learner. A group's task is a row of the env's tasks (`env.tasks=PATH`,
or the env's own), in a seeded order per epoch (`DataCursor`); an env without tasks (the
Gymnasium way: its state drawn from the seed) is played by seeds instead, each group on one
seed row `seed-<n>` from `SeedStream`, below `heldout.seed_offset` where held-out seeds start
(`trainer.run_env`). A worker may start a group only when the `StalenessGate` admits it, so
no sample lags the learner by more than `max_staleness` policy versions (0 = synchronous
on-policy).

One training step, top to bottom (`TrainingLoop._train_step`):

    1. wait for a batch: `groups_per_step` finished groups, oldest first; groups at their
       staleness limit are always included, so the bound holds for every sample
    2. advantages per group (GRPO / Dr.GRPO / RLOO) -> one advantage per TrainingSample;
       every token keeps the policy version that produced it (`trainer.batch`); on-policy
       distillation (`advantage: opd`) adds a per-token one: the teacher scores every sampled
       token (`trainer.opd`)
    3. `learner.train_step` in a worker thread (the event loop keeps generating meanwhile);
       truncated IS corrects tokens from older versions
    4. publish: `learner.engine_weights()` -> `engine.update_weights(weights, version)`, without
       waiting for episodes in flight (a local engine loads them between two decoding steps and
       tags later tokens with the new version); the sync check (`trainer.sync_check`: engine
       and learner score a fixed probe at the new version; the first step measures the floor
       and takes the probe from its batch); then open the gate one version further (except
       after the last step)
    5. mark the groups consumed; held-out evaluation when due (`trainer.heldout`: before
       the first step, every `every_steps`, after the last; no weights are published while
       it runs); log metrics; checkpoint; at the end write `summary.json`

The backends differ only in their parts (`trainer.backends.base.Parts`):

- local (`AsyncTrainer`): a torch `Learner` in this process; a `LocalEngine` thread or
  `VLLMEngine`.
- ray (`RayTrainer`, `--ray`): `RayLearner` (one actor) or `RayDataParallelLearner` (FSDP2 /
  DeepSpeed ranks); `RayEngine` (engine actors); optionally env actors (its hooks' `make_env`).
- tinker (`TinkerTrainer`): `TinkerLearner` (forward_backward + optim_step on a Tinker
  endpoint); `TinkerEngine` (sampling clients of the weights it saves for sampling).
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from skyrl_gym.tasks import TaskRow
from skyrl_sdk.agents.agent import Agent
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.command_agent import CommandAgentRunner
from skyrl_sdk.agents.policy import Completion, GenerationContext, Policy, SamplingParams
from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits
from skyrl_sdk.agents.rollout import play_episode as play_agent_episode
from skyrl_sdk.agents.scoring import Scorer
from skyrl_sdk.agents.trajectory import Trajectory, TrajectoryWriter
from skyrl_sdk.trainer import heldout, opd
from skyrl_sdk.trainer._moved import moved_name
from skyrl_sdk.trainer.backends.base import BackendHooks, RunOutcome
from skyrl_sdk.trainer.batch import Group, build_batch, flat_groups, step_metrics
from skyrl_sdk.trainer.config import TrainConfig
from skyrl_sdk.trainer.generation import GroupGenerator, set_aside_rule
from skyrl_sdk.trainer.metrics import MultiSink
from skyrl_sdk.trainer.run import RunState, rollout_limits
from skyrl_sdk.trainer.run_env import make_env
from skyrl_sdk.trainer.sync_check import SyncCheck

if TYPE_CHECKING:  # `loop.PolicyEngine` and `loop.PolicyLearner` resolve, deprecated, below
    from skyrl_sdk.trainer.backends.base import PolicyEngine, PolicyLearner


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


class TrainingLoop:
    """The RL loop over one run, assembled from a backend's parts (`trainer.backends`).

    Without a learner and an engine the loop only sets up its run (tasks, resume checks) and
    cannot train. The parts are read when `train` starts, so a caller may wrap `policy`
    before (a latency-injecting policy in `skyrl bench async`, the demo's progress counter).
    """

    learner: PolicyLearner
    """Trains the policy and hands out its weights."""
    engine: PolicyEngine
    """Samples episodes; receives the learner's weights after every step."""
    policy: Policy
    """What episodes sample from (the engine, with per-turn seeds: `SeededPolicy`)."""
    limits: RolloutLimits
    """Turn and token limits of every episode."""
    hooks: BackendHooks
    """The backend's additions: its envs, metrics, summary keys, checkpoint files, goodbye."""
    sinks: MultiSink
    """Where metrics go (`RunState.open_outputs`)."""
    writer: TrajectoryWriter | None
    """Where trajectories go (None: `logging.trajectories` is off)."""
    command_agent: CommandAgentRunner | None = None
    """Plays every episode instead of `rollout` when `agent.spec` is `command:CMD` (set by
    `train`: an external program in the episode's sandbox, against `policy` served over
    OpenAI's API; its captured tokens are the trajectory)."""
    sync_check: SyncCheck
    """Scores a probe on the engine and the learner after every publish (set by `train`)."""
    teacher: Scorer | None = None
    """`advantage: opd`'s teacher (`trainer.opd`): built by `train` unless a caller set one."""
    agent: Agent
    """What plays every episode (set by `train`): `command_agent`, or the loop agent
    (`LoopAgent`: `policy` through `rollout`, with `limits` and `sampling`)."""

    def __init__(
        self,
        config: TrainConfig,
        learner: PolicyLearner | None = None,
        engine: PolicyEngine | None = None,
        *,
        run: RunState | None = None,
        limits: RolloutLimits | None = None,
        hooks: BackendHooks | None = None,
        resume: bool = False,
        console: Console | None = None,
    ):
        """The loop of `learner` and `engine` (at the same policy version) over `run` (None:
        set up here from `config`, `resume` and `console`, as `RunState` does); `limits`
        defaults to `config`'s with the engine's context, `hooks` to none. Opens the run's
        outputs."""
        if (learner is None) != (engine is None):
            raise TypeError("TrainingLoop takes a learner and an engine, or neither")
        self.state = run or RunState(config, resume=resume, console=console)
        """The run's tasks, data order and checkpoints."""
        self.config = config
        self.console = self.state.console
        self.run_dir = self.state.run_dir
        self.env_kwargs = self.state.env_kwargs
        self.tasks = self.state.tasks
        self.seeds = self.state.seeds
        self.heldout_tasks = self.state.heldout_tasks
        self.cursor = self.state.cursor
        self.sampling = self.state.sampling
        self.resumed_from = self.state.resumed_from
        self.step = self.state.start_step
        """Optimizer steps completed, over all resumes."""
        self.hooks = hooks or BackendHooks()
        self._flat_steps = 0
        """Steps whose groups all had rewards without variance (no learning signal)."""
        self._tokens_checked = False
        """Whether the first episode's prompt was checked for unknown tokens."""
        if learner is None or engine is None:
            return
        self.learner = learner
        self.engine = engine
        self.policy = SeededPolicy(engine, config.seed)
        context = getattr(engine, "max_context_tokens", None)
        self.limits = limits or rollout_limits(config, context)
        self.sinks, self.writer = self.state.open_outputs()

    def make_env(self) -> Any:
        """A fresh env for one episode (the backend's, e.g. leased from Ray env actors)."""
        env = self.hooks.make_env()
        return make_env(self.config, self.env_kwargs) if env is None else env

    def run(self) -> TrainResult:
        """Train to `trainer.steps` (blocking), then stop what the backend started."""
        try:
            return asyncio.run(self.train())
        finally:
            self.hooks.close()

    async def train(self) -> TrainResult:
        """Train to `trainer.steps`; see the module docstring for one step."""
        if "learner" not in vars(self):
            raise RuntimeError("this TrainingLoop has no learner and engine to train with")
        cfg = self.config.trainer
        rule = set_aside_rule(self.config.algorithm)
        generator = GroupGenerator(cfg, self.cursor, self.learner.version, self._play_group, rule)
        self.command_agent = CommandAgentRunner.for_training(
            self.config.agent, self.policy, self.run_dir
        )
        self.agent = self.command_agent or LoopAgent(self.policy, self.limits, self.sampling)
        self.sync_check = SyncCheck(cfg.sync_check, self.learner, self.engine, self.console)
        if self.teacher is None:  # None again unless `advantage: opd`
            self.teacher = await opd.teacher_for(self.config, self.engine)
        history: list[dict[str, Any]] = []
        outcome = RunOutcome.ERRORED
        evaluator = self._heldout_evaluator()
        try:
            # The engine serves the learner's weights before the first episode starts.
            if self.engine.policy_version != self.learner.version:
                await self._publish()
            before = self.config.heldout.before_training and self.resumed_from is None
            if evaluator is not None and before:
                await self._evaluate_heldout(evaluator)  # the untrained policy
            generator.start()
            while self.step < cfg.steps:
                history.append(await self._train_step(generator, evaluator))
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
            await generator.stop()
            await self._close(outcome)
        result = TrainResult(
            self.run_dir, self.step, self.learner.version, tuple(history), self.resumed_from
        )
        (self.run_dir / "summary.json").write_text(json.dumps(self._summary(result)))
        return result

    async def _train_step(
        self, generator: GroupGenerator, evaluator: heldout.HeldoutEvaluator | None
    ) -> dict[str, Any]:
        """One step (module docstring, 1-5); its history row."""
        cfg = self.config.trainer
        t_step = time.perf_counter()
        # 1. A batch of finished groups.
        groups = await generator.next_batch(self.learner.version)
        t_wait = time.perf_counter() - t_step
        # 2. Advantages, flattened to one per training sample.
        samples, advantages, adv_values = build_batch(groups, self.config.algorithm)
        await self.sync_check.calibrate(samples, self.learner.version)  # the first step only
        alg = self.config.algorithm
        top_k = alg.opd_top_k if alg.opd_logit_kl_coef > 0 else 0
        samples, distilled = await opd.distill_batch(samples, self.teacher, top_k)  # opd only
        flat = flat_groups(groups)
        if len(flat) == len(groups) and self.teacher is None:
            self._no_signal(flat)
        # 3. Train off the event loop, so episodes keep running meanwhile.
        t0 = time.perf_counter()
        stats = await asyncio.to_thread(self.learner.train_step, samples, advantages)
        t_train = time.perf_counter() - t0
        # 4. Publish: queued for the engine, no waiting on episodes in flight.
        t0 = time.perf_counter()
        await self._publish()
        if self.step + 1 < cfg.steps:  # admit no group that no batch will train
            await generator.advance(self.learner.version)
        t_sync = time.perf_counter() - t0
        # 5. Bookkeeping.
        self.cursor.mark_consumed(g.index for g in groups)
        self.step += 1
        metrics = step_metrics(groups, stats, adv_values, self.learner.version)
        metrics.update(self.sync_check.pop_metrics())
        metrics.update(distilled)
        metrics.update({"groups/no_variance": len(flat), **generator.metrics()})
        self.hooks.add_metrics(metrics)
        metrics.update(
            {
                "time/wait_s": t_wait,
                "time/train_s": t_train,
                "time/sync_s": t_sync,
                "time/step_s": time.perf_counter() - t_step,
            }
        )
        metrics["throughput/tokens_per_s"] = metrics["tokens/generated"] / metrics["time/step_s"]
        # Held-out episodes at the version just published (none is published until they
        # finish), outside the step's timings.
        last = self.step == cfg.steps
        if evaluator is not None and evaluator.due(self.step, last=last):
            metrics.update(await self._evaluate_heldout(evaluator))
        self.sinks.log(metrics, self.step)
        row = {"step": self.step, **metrics}
        if last or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
            await asyncio.to_thread(self.save_checkpoint)
        return row

    async def _close(self, outcome: RunOutcome) -> None:
        """Close the command agent, the engine and the outputs; then the backend's `finish`."""
        if self.command_agent is not None:
            self.command_agent.close()
        await self.engine.aclose()
        self.sinks.close()
        if self.writer is not None:
            self.writer.close()
        await self.hooks.finish(outcome)

    def _no_signal(self, flat: Sequence[float]) -> None:
        """Count a step whose every group had equal rewards; say so the first time."""
        self._flat_steps += 1
        if self._flat_steps == 1:
            self.console.print(no_signal_warning(self.step + 1, flat), soft_wrap=True)

    def _check_prompt_tokens(self, trajectory: Trajectory) -> None:
        """Warn once when most of the env's opening text is unknown to the tokenizer (a
        word-level vocabulary, e.g. `lookup-tiny`'s, on another env's text)."""
        if not trajectory.prompt_messages:
            return  # failed at reset: check the next group's opening
        self._tokens_checked = True
        tokenizer = getattr(getattr(self.engine, "renderer", None), "tokenizer", None)
        warning = unknown_tokens_warning(self.config, tokenizer, trajectory.prompt_messages)
        if warning is not None:
            self.console.print(warning, soft_wrap=True)

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
            print_line=self.console.print,
        )

    async def _evaluate_heldout(self, evaluator: heldout.HeldoutEvaluator) -> dict[str, float]:
        """Evaluate the learner's current version on the held-out tasks; its metrics."""
        version = self.learner.version
        if not await asyncio.to_thread(self.engine.wait_for_version, version):
            raise RuntimeError(f"the engine did not load version {version} for held-out episodes")
        t0 = time.perf_counter()
        result = await evaluator.evaluate(self.policy, step=self.step, version=version)
        return {
            "heldout/success": result.success,
            "heldout/ci_low": result.ci_low,
            "heldout/ci_high": result.ci_high,
            "heldout/reward_mean": result.reward_mean,
            "time/heldout_s": time.perf_counter() - t0,
        }

    async def _publish(self) -> None:
        """Hand the learner's current weights to the engine, then check the sync (before
        any episode of the new version is admitted)."""
        weights = await asyncio.to_thread(self.learner.engine_weights)
        self.engine.update_weights(weights, self.learner.version)
        await self.sync_check.after_publish(self.learner.version)

    async def _play_group(self, index: int, version: int) -> Group:
        """Group `index` (admitted at learner `version`): its task's `group_size` episodes."""
        task = self.state.task_for_group(index)
        trajectories = await asyncio.gather(
            *(self.play_episode(index, k, task) for k in range(self.config.rollout.group_size))
        )
        if not self._tokens_checked:
            self._check_prompt_tokens(trajectories[0])
        return Group(index, str(task.get("task_id", "")), version, tuple(trajectories))

    async def play_episode(self, index: int, k: int, task: TaskRow) -> Trajectory:
        """Episode `k` of group `index` on a fresh env, played by the run's agent through
        `agents.rollout.play_episode`, recorded to the run's trajectory file."""
        trajectory = await play_agent_episode(
            self.make_env,
            self.agent,
            task,
            episode_id=f"g{index}/{task.get('task_id', '')}#{k}",
            env_id=self.config.env.id or "",
        )
        if self.writer is not None:
            self.writer.write(trajectory)
        return trajectory

    def save_checkpoint(self) -> Path:
        """Save learner, data cursor, RNG and step (called between steps)."""
        path = self.state.save_checkpoint(self.step, self.learner.state_dict())
        self.hooks.checkpoint_saved(path, self.step)
        return path

    def _summary(self, result: TrainResult) -> dict[str, Any]:
        """What `summary.json` holds (with held-out success before and after training, from
        `heldout.jsonl`, when the run evaluates on held-out tasks; then the backend's keys)."""
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
        return {**summary, **self.hooks.summary()}


def no_signal_warning(step: int, flat: Sequence[float]) -> str:
    """The warning for step `step`, whose every group had one reward (`flat`: each group's)."""
    counts = Counter(flat)
    kinds = ", ".join(
        f"{n} all {value:g}" for value, n in sorted(counts.items(), key=lambda kv: kv[0])
    )
    return (
        f"[yellow]warning: step {step}: no learning signal: in all {len(flat)} "
        f"groups every episode got the same reward ({kinds}), so every advantage is 0. "
        "Said once; the metric groups/no_variance counts such groups per step.[/yellow]"
    )


def unknown_tokens_warning(
    config: TrainConfig, tokenizer: Any, messages: Iterable[Mapping[str, Any]]
) -> str | None:
    """The warning when most tokens of the env's opening `messages` are unknown to
    `tokenizer` (None: it reads them)."""
    unknown, total = unknown_tokens(tokenizer, messages)
    if not (total and unknown * 2 > total):
        return None
    token = getattr(tokenizer, "unk_token", None) or "unknown"
    return (
        f"[yellow]warning: {unknown} of the {total} tokens of env "
        f"{escape(repr(config.env.id))}'s opening messages ({unknown / total:.0%}) are "
        f"unknown to the tokenizer of model.source={config.model.source.value} "
        f"(it reads them as {token}): the policy cannot read the task. Choose a "
        "tokenizer that covers the env's text (model.source=tiny is byte-level)."
        "[/yellow]"
    )


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


def __getattr__(name: str) -> Any:
    """The names that moved out of this module (`trainer._moved.NAME_MOVES`), deprecated."""
    return moved_name(__name__, name)
