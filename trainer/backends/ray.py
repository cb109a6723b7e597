"""The Ray backend (`--ray`): the learner, the rollout (inference) engines and the envs as Ray
actors.

The training loop is `trainer.loop`'s, unchanged (admission control, staleness bound, batch
order, checkpoints); `build_ray` builds its parts once, as proxies to actors (`RayTrainer` is
the loop of these parts):

- the learner: with `distributed.strategy: none` one `LearnerActor` owns a `Learner` and
  `RayLearner` forwards to it. With `fsdp` or `deepspeed`, `distributed.world_size`
  `LearnerRankActor`s form one torch.distributed process group (gloo on CPU, NCCL on GPUs;
  the driver picks the rendezvous address, a free port on 127.0.0.1 on a one-node cluster)
  and each wraps an `FSDPLearner` or `DeepSpeedLearner`. `RayDataParallelLearner` splits
  each batch over the ranks (`shard_batch`), runs `train_step` on all of them at once,
  combines their stats (`combine_stats`), and hands the engines rank 0's full weights.
- `EngineActor` owns a `LocalEngine` (async actor: many `generate` calls in flight, batched
  decoding); `RayEngine` forwards `generate` and `update_weights`. Rollout requests are
  spread over the engines round robin.
- envs: `distributed.env_workers` `EnvActor`s (`trainer.ray_envs`) run every episode's
  env; `RayHooks.make_env` leases one per episode, round robin. Episodes themselves (the
  agent loop) run on the driver's event loop. With `env_workers: 0` envs stay on the driver.

Weights go from the learner (rank 0) to every engine actor as one object in the Ray object
store (the driver only passes the reference), in flight: an engine loads them between two
decoding steps, as in one-process mode. Checkpoints hold the learner's unsharded state in the
single-process layout (see `trainer.distributed_learner`), so `--resume` works across
strategies and world sizes.

Actors ask for `num_cpus=0` so that they never leave tasks pending on a small machine
(Ray's scheduler would otherwise hold CPUs for them; see feasibility.md section 6), and use
`trainer.torch_threads` (default 1) torch threads each.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
import torch
from rich.console import Console

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import Completion, GenerationContext, SamplingParams
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.backends.base import BackendHooks, Parts
from skyrl_sdk.trainer.config import DistributedStrategy, TrainConfig
from skyrl_sdk.trainer.distributed_learner import combine_stats, shard_batch
from skyrl_sdk.trainer.learner import Learner, LearnerSettings, LearnerStats
from skyrl_sdk.trainer.models import load_model
from skyrl_sdk.trainer.ray_envs import EnvPool
from skyrl_sdk.trainer.run import RunState, rollout_limits

SETUP_TIMEOUT_S = 300.0
"""Longest wait for the learner ranks to build their models and join the process group."""


def init_local_ray(num_cpus: int = 2) -> None:
    """Start (or join) a local Ray cluster without the dashboard or token auth."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )


def _model_and_tokenizer(config: TrainConfig) -> tuple[Any, Any]:
    """The model architecture and tokenizer (no pre-training: weights come from the driver)."""
    model_cfg = config.model.model_copy(update={"pretrain_steps": 0})
    return load_model(model_cfg, seed=config.seed)


def _free_port(host: str) -> int:
    """A TCP port nobody listens on right now at `host` (for the process group's store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _get_all(refs: Sequence[Any], timeout: float | None = None) -> list[Any]:
    """`ray.get` of every ref, raising the first failure as soon as it happens (a rank that
    fails would otherwise leave the driver waiting on its peers' collectives)."""
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError(f"{len(pending)} actor calls did not finish in {timeout} s")
        ray.get(ready)
    return ray.get(list(refs))


# -- learner actors -------------------------------------------------------------------------


@ray.remote(num_cpus=0)
class LearnerActor:
    """Owns the `Learner`; starts from the driver's learner state."""

    def __init__(self, config: TrainConfig, state: Mapping[str, Any], torch_threads: int):
        torch.set_num_threads(torch_threads)
        model, tokenizer = _model_and_tokenizer(config)
        self.learner = Learner(model, LearnerSettings.from_config(config, tokenizer))
        self.learner.load_state_dict(state)

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        return self.learner.train_step(samples, advantages)

    def engine_weights(self) -> dict[str, torch.Tensor]:
        return self.learner.engine_weights()

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        # A synchronous actor: no event loop runs here, so the learner's coroutine gets one.
        return asyncio.run(self.learner.score(prompt_ids, completion_ids))

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> int:
        self.learner.load_state_dict(state)
        return self.learner.version

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class LearnerRankActor:
    """One rank of a data-parallel learner (`FSDPLearner` or `DeepSpeedLearner`)."""

    def __init__(self, rank: int, world_size: int, torch_threads: int):
        torch.set_num_threads(torch_threads)
        self.rank = rank
        self.world_size = world_size
        self.learner: Any = None

    def free_address(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0 hosts the rendezvous)."""
        host = ray.util.get_node_ip_address()
        return host, _free_port(host)

    def setup(
        self, config: TrainConfig, master_addr: str, master_port: int, state: Mapping[str, Any]
    ) -> int:
        """Join the process group, build this rank's learner, load `state`; returns the
        policy version. Every rank must be called at once (the group forms collectively)."""
        from skyrl_sdk.trainer.distributed_learner import DeepSpeedLearner, FSDPLearner

        os.environ.update(
            {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "RANK": str(self.rank),
                "WORLD_SIZE": str(self.world_size),
                # Each actor sees only its own accelerator (if any) as device 0.
                "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1",
            }
        )
        model, tokenizer = _model_and_tokenizer(config)
        settings = LearnerSettings.from_config(config, tokenizer)
        strategy = config.distributed.strategy
        if strategy is DistributedStrategy.FSDP:
            self.learner = FSDPLearner(model, settings)
        elif strategy is DistributedStrategy.DEEPSPEED:
            self.learner = DeepSpeedLearner(
                model, settings, zero_stage=config.distributed.zero_stage
            )
        else:
            raise ValueError(f"distributed.strategy {strategy.value!r} has no learner ranks")
        self.learner.load_state_dict(state)
        return self.learner.version

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """One step on this rank's share of the batch (split by the driver)."""
        return self.learner.train_shard(samples, advantages)

    def engine_weights(self) -> Any:
        """Gather the full weights (a collective); rank 0 puts them in the object store and
        returns the reference, the other ranks return None."""
        weights = self.learner.engine_weights()
        return ray.put(weights) if self.rank == 0 else None

    def state_dict(self) -> dict[str, Any] | None:
        """The unsharded state (a collective): rank 0 returns it, the others None."""
        state = self.learner.state_dict()
        return state if self.rank == 0 else None

    def load_state_dict(self, state: Mapping[str, Any]) -> int:
        self.learner.load_state_dict(state)
        return self.learner.version

    def pid(self) -> int:
        return os.getpid()


class RayLearner:
    """The loop's learner (`PolicyLearner`), forwarded to a `LearnerActor`."""

    def __init__(self, actor: Any, version: int):
        self.actor = actor
        self.version = version
        """Policy version after the last `train_step` (kept on the driver)."""

    @property
    def actors(self) -> list[Any]:
        """The learner's actors (one)."""
        return [self.actor]

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        stats = ray.get(self.actor.train_step.remote(list(samples), list(advantages)))
        self.version += 1
        return stats

    def engine_weights(self) -> Any:
        """A reference to the weights in the object store (engines resolve it themselves)."""
        return self.actor.engine_weights.remote()

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """The learner actor's scores (`agents.scoring.Scorer`)."""
        return await self.actor.score.remote(list(prompt_ids), list(completion_ids))

    def state_dict(self) -> dict[str, Any]:
        return ray.get(self.actor.state_dict.remote())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.version = ray.get(self.actor.load_state_dict.remote(state))

    def close(self) -> None:
        """Stop the actor."""
        ray.kill(self.actor)


class RayDataParallelLearner:
    """The loop's learner (`PolicyLearner`), over `LearnerRankActor`s (one per rank)."""

    def __init__(self, actors: Sequence[Any], version: int):
        self.actors = list(actors)
        """The ranks' actors, rank 0 first."""
        self.version = version
        """Policy version after the last `train_step` (kept on the driver)."""

    @classmethod
    def start(
        cls, config: TrainConfig, state: Mapping[str, Any], version: int, torch_threads: int
    ) -> RayDataParallelLearner:
        """Start `distributed.world_size` ranks from `state` (a learner's `state_dict`)."""
        world = config.distributed.world_size
        actors = [LearnerRankActor.remote(rank, world, torch_threads) for rank in range(world)]
        learner = cls(actors, version)
        try:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            if len(alive) <= 1:
                addr, port = "127.0.0.1", _free_port("127.0.0.1")
            else:
                addr, port = ray.get(actors[0].free_address.remote())
            state_ref = ray.put(dict(state))
            calls = [a.setup.remote(config, addr, port, state_ref) for a in actors]
            learner.version = _get_all(calls, timeout=SETUP_TIMEOUT_S)[0]
        except BaseException:
            learner.close()
            raise
        return learner

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """Split the batch over the ranks, train them all at once, combine their stats."""
        world = len(self.actors)
        shards = [shard_batch(samples, advantages, rank, world) for rank in range(world)]
        stats = _get_all(
            [a.train_step.remote(s, adv) for a, (s, adv) in zip(self.actors, shards, strict=True)]
        )
        self.version += 1
        tokens = sum(sum(s.loss_mask[1:]) for s in samples)
        return combine_stats(stats, tokens=tokens, sequences=len(samples))

    def engine_weights(self) -> Any:
        """A reference to rank 0's full weights in the object store (every rank takes part
        in gathering them; the driver never holds the tensors)."""
        refs = _get_all([a.engine_weights.remote() for a in self.actors])
        return refs[0]

    def state_dict(self) -> dict[str, Any]:
        """The unsharded learner state (single-process layout), from rank 0."""
        return _get_all([a.state_dict.remote() for a in self.actors])[0]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load an unsharded learner state into every rank."""
        ref = ray.put(dict(state))
        self.version = _get_all([a.load_state_dict.remote(ref) for a in self.actors])[0]

    def pids(self) -> list[int]:
        """The ranks' process ids, rank 0 first."""
        return ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        """Stop every rank (the process group goes with them)."""
        for actor in self.actors:
            ray.kill(actor)


# -- engine actors --------------------------------------------------------------------------


@ray.remote(num_cpus=0)
class EngineActor:
    """Owns a `LocalEngine` (an async actor: generate calls run concurrently)."""

    def __init__(
        self,
        config: TrainConfig,
        weights: Mapping[str, torch.Tensor],
        version: int,
        torch_threads: int,
    ):
        from skyrl_sdk.agents.engine.frontend import LocalEngine

        torch.set_num_threads(torch_threads)
        model, tokenizer = _model_and_tokenizer(config)
        model.load_state_dict(weights)
        self.engine = LocalEngine(
            model.eval().requires_grad_(False),
            tokenizer,
            max_batch_size=config.rollout.engine_batch_size,
            name=f"ray:{config.model.source.value}",
            policy_version=version,
        )

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        context: GenerationContext | None = None,
    ) -> Completion:
        return await self.engine.generate(prompt_token_ids, sampling, context=context)

    async def update_weights(self, weights: Mapping[str, torch.Tensor], version: int) -> None:
        self.engine.update_weights(weights, version)

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        return await self.engine.score(prompt_ids, completion_ids)

    async def policy_version(self) -> int:
        return self.engine.policy_version

    async def close(self) -> None:
        await self.engine.aclose()

    async def pid(self) -> int:
        return os.getpid()


class RayEngine:
    """The loop's engine (`PolicyEngine`), spread over `EngineActor`s round robin."""

    def __init__(
        self,
        actors: Sequence[Any],
        renderer: ChatRenderer,
        name: str,
        version: int,
        max_context_tokens: int | None = None,
    ):
        self.actors = list(actors)
        self._next = itertools.cycle(self.actors)
        self._renderer = renderer
        self.name = name
        self.policy_version = version
        """Latest version pushed to the engines (they load it between decoding steps)."""
        self.max_context_tokens = max_context_tokens
        """The engines' model's context length (None: unknown)."""

    @property
    def renderer(self) -> ChatRenderer:
        return self._renderer

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        actor = next(self._next)
        return await actor.generate.remote(list(prompt_token_ids), sampling, context)

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """One engine's scores (`agents.scoring.Scorer`), round robin as `generate`: the sync
        check's probe sequences spread over the engines."""
        actor = next(self._next)
        return await actor.score.remote(list(prompt_ids), list(completion_ids))

    def update_weights(self, weights: Any, version: int) -> None:
        """Send new weights (a dict or an object reference) to every engine, in flight.

        Returns once every engine has queued them (not loaded: that happens between two
        decoding steps), so any token decoded after the learner publishes `version`
        carries at least that version, which the staleness bound relies on.
        """
        ref = weights if isinstance(weights, ray.ObjectRef) else ray.put(weights)
        ray.get([actor.update_weights.remote(ref, version) for actor in self.actors])
        self.policy_version = version

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """True once `version` was pushed: every engine has queued it and loads it before its
        next decoding step (`update_weights` returns only then)."""
        return self.policy_version >= version

    async def aclose(self) -> None:
        for actor in self.actors:
            await actor.close.remote()

    def close(self) -> None:
        """Stop the actors."""
        for actor in self.actors:
            ray.kill(actor)


# -- the parts ------------------------------------------------------------------------------


class RayHooks(BackendHooks):
    """Ray mode's additions to the loop: episodes' envs leased from the env actors, and
    stopping every actor when the run is done."""

    def __init__(
        self,
        learner: RayLearner | RayDataParallelLearner,
        engine: RayEngine,
        env_pool: EnvPool | None,
    ):
        self.learner = learner
        self.engine = engine
        self.env_pool = env_pool
        """Where episodes' envs live (None: on the driver, as in one-process mode)."""
        self._closed = False

    def make_env(self) -> Any | None:
        """An env leased from the env actors (None without a pool: the loop makes one)."""
        return None if self.env_pool is None else self.env_pool.make()

    def close(self) -> None:
        """Stop the learner, engine and env actors (safe to call more than once)."""
        if self._closed:
            return
        self._closed = True
        self.learner.close()
        self.engine.close()
        if self.env_pool is not None:
            self.env_pool.close()


@dataclass(frozen=True)
class RayParts(Parts):
    """Ray mode's parts."""

    learner: RayLearner | RayDataParallelLearner
    """Proxy to the learner actor (or the data-parallel ranks)."""
    engine: RayEngine
    """Proxy to the engine actors."""
    hooks: RayHooks
    """Leases envs from the env actors; stops every actor."""


def build_ray(
    config: TrainConfig,
    *,
    resume: bool = False,
    num_engines: int = 1,
    env_workers: int | None = None,
    console: Console | None = None,
) -> RayParts:
    """The learner, `num_engines` engines and (`env_workers`, default
    `distributed.env_workers`) env actors of a Ray run (Ray must be initialised).

    The initial learner state is built on the driver as one-process mode builds it (model,
    LoRA, optimizer, `--resume`), then moved into the actors, so a Ray run starts from the
    very weights, data position and policy version that one-process mode would.
    """
    if config.trainer.torch_threads:
        torch.set_num_threads(config.trainer.torch_threads)
    run = RunState(config, resume=resume, console=console)
    model, tokenizer = load_model(config.model, seed=config.seed)
    local = Learner(model, LearnerSettings.from_config(config, tokenizer))
    if resume and (state := run.load_checkpoint()) is not None:
        local.load_state_dict(state.learner)
        run.resume_at(state, f"policy version {local.version}")
    threads = config.trainer.torch_threads or 1
    workers = config.distributed.env_workers if env_workers is None else env_workers
    started: list[Any] = []
    try:
        learner_state = local.state_dict()
        learner: RayLearner | RayDataParallelLearner
        if config.distributed.strategy is DistributedStrategy.NONE:
            actor = LearnerActor.remote(config, learner_state, threads)
            learner = RayLearner(actor, local.version)
        else:
            learner = RayDataParallelLearner.start(config, learner_state, local.version, threads)
        started.append(learner)
        weights = ray.put(local.engine_weights())
        engines = [
            EngineActor.remote(config, weights, local.version, threads) for _ in range(num_engines)
        ]
        engine = RayEngine(
            engines,
            ChatRenderer(tokenizer),
            f"ray:{config.model.source.value}",
            local.version,
            getattr(model.config, "max_position_embeddings", None),
        )
        started.append(engine)
        env_pool = None
        if workers:
            env_pool = EnvPool.start(
                config.env.id,
                size=workers,
                max_turns=config.env.max_turns,
                kwargs=run.env_kwargs,  # task rows read once, by the run
            )
            started.append(env_pool)
        ray.get([a.pid.remote() for a in [*learner.actors, *engines]])
    except BaseException:
        for part in started:
            part.close()
        raise
    limits = rollout_limits(config, engine.max_context_tokens)
    return RayParts(run, learner, engine, limits, RayHooks(learner, engine, env_pool))
