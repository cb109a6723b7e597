"""Ray mode: the learner and the rollout (inference) engines as Ray actors.

The training loop is `AsyncTrainer`'s, unchanged (admission control, staleness bound, batch
order, checkpoints); only two objects it talks to become proxies to actors:

- `LearnerActor` owns the `Learner` (model, optimizer, scheduler); `RayLearner` forwards
  `train_step`, `engine_weights`, `state_dict` and `load_state_dict` to it.
- `EngineActor` owns a `LocalEngine` (async actor: many `generate` calls in flight, batched
  decoding); `RayEngine` forwards `generate` and `update_weights`. Rollout requests are
  spread over the engines round robin.

Weights go from the learner actor to every engine actor as one object in the Ray object
store (the driver only passes the reference), in flight: an engine loads them between two
decoding steps, as in one-process mode. Episodes and envs run on the driver's event loop.

Actors ask for `num_cpus=0` so that they never leave tasks pending on a small machine
(Ray's scheduler would otherwise hold CPUs for them; see feasibility.md section 6).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import ray
import torch

from agents.policy import Completion, GenerationContext, SamplingParams
from agents.trajectory import TrainingSample
from trainer.async_trainer import AsyncTrainer, SeededPolicy, TrainResult
from trainer.config import TrainConfig
from trainer.learner import Learner, LearnerStats


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
    from trainer.models import load_model

    model_cfg = config.model.model_copy(update={"pretrain_steps": 0})
    return load_model(model_cfg, seed=config.seed)


@ray.remote(num_cpus=0)
class LearnerActor:
    """Owns the `Learner`; starts from the driver's learner state."""

    def __init__(self, config: TrainConfig, state: Mapping[str, Any], torch_threads: int):
        torch.set_num_threads(torch_threads)
        model, tokenizer = _model_and_tokenizer(config)
        self.learner = Learner(
            model,
            algorithm=config.algorithm,
            optim=config.optim,
            lora=config.model.lora,
            temperature=config.rollout.temperature,
            pad_token_id=tokenizer.pad_token_id or 0,
            total_steps=config.trainer.steps,
            micro_batch_size=config.trainer.micro_batch_size,
        )
        self.learner.load_state_dict(state)

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        return self.learner.train_step(samples, advantages)

    def engine_weights(self) -> dict[str, torch.Tensor]:
        return self.learner.engine_weights()

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> int:
        self.learner.load_state_dict(state)
        return self.learner.version

    def pid(self) -> int:
        return os.getpid()


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
        from agents.local_engine import LocalEngine

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

    async def policy_version(self) -> int:
        return self.engine.policy_version

    async def close(self) -> None:
        await self.engine.aclose()

    async def pid(self) -> int:
        return os.getpid()


class RayLearner:
    """What `AsyncTrainer` needs of a learner, forwarded to a `LearnerActor`."""

    def __init__(self, actor: Any, version: int):
        self.actor = actor
        self.version = version
        """Policy version after the last `train_step` (kept on the driver)."""

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        stats = ray.get(self.actor.train_step.remote(list(samples), list(advantages)))
        self.version += 1
        return stats

    def engine_weights(self) -> Any:
        """A reference to the weights in the object store (engines resolve it themselves)."""
        return self.actor.engine_weights.remote()

    def state_dict(self) -> dict[str, Any]:
        return ray.get(self.actor.state_dict.remote())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.version = ray.get(self.actor.load_state_dict.remote(state))


class RayEngine:
    """What `AsyncTrainer` needs of an engine, spread over `EngineActor`s round robin."""

    def __init__(self, actors: Sequence[Any], renderer: Any, name: str, version: int):
        self.actors = list(actors)
        self._next = itertools.cycle(self.actors)
        self._renderer = renderer
        self.name = name
        self.policy_version = version
        """Latest version pushed to the engines (they load it between decoding steps)."""

    @property
    def renderer(self) -> Any:
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

    def update_weights(self, weights: Any, version: int) -> None:
        """Send new weights (a dict or an object reference) to every engine, in flight.

        Returns once every engine has queued them (not loaded: that happens between two
        decoding steps), so any token decoded after the learner publishes `version`
        carries at least that version, which the staleness bound relies on.
        """
        ref = weights if isinstance(weights, ray.ObjectRef) else ray.put(weights)
        ray.get([actor.update_weights.remote(ref, version) for actor in self.actors])
        self.policy_version = version

    async def aclose(self) -> None:
        for actor in self.actors:
            await actor.close.remote()


def make_ray_trainer(
    config: TrainConfig, *, resume: bool = False, num_engines: int = 1
) -> AsyncTrainer:
    """An `AsyncTrainer` whose learner and engines are Ray actors (Ray must be initialised;
    call outside a running event loop).

    The trainer is built as usual (model, data order, resume), then its learner state and
    engine weights move into the actors, so a Ray run starts from the very weights, data
    position and policy version that one-process mode would.
    """
    trainer = AsyncTrainer(config, resume=resume)
    local = trainer.learner
    threads = config.trainer.torch_threads or 1
    learner_actor = LearnerActor.remote(config, local.state_dict(), threads)
    weights = ray.put(local.engine_weights())
    engines = [
        EngineActor.remote(config, weights, local.version, threads) for _ in range(num_engines)
    ]
    ray.get([learner_actor.pid.remote(), *(e.pid.remote() for e in engines)])
    # The in-process engine and learner are no longer used.
    asyncio.run(trainer.engine.aclose())
    trainer.learner = RayLearner(learner_actor, local.version)  # type: ignore[assignment]
    trainer.engine = RayEngine(  # type: ignore[assignment]
        engines, trainer.engine.renderer, f"ray:{config.model.source.value}", local.version
    )
    trainer.policy = SeededPolicy(trainer.engine, config.seed)  # type: ignore[arg-type]
    return trainer


def run_ray(config: TrainConfig, *, resume: bool = False, num_engines: int = 1) -> TrainResult:
    """Train with Ray actors on a local cluster (started here if needed)."""
    init_local_ray()
    return make_ray_trainer(config, resume=resume, num_engines=num_engines).run()
