"""Ray mode (`--ray`): `RayTrainer`, the RL loop (`trainer.loop`) of the Ray backend's parts
(`trainer.backends.ray`: the learner, the rollout engines and the envs as Ray actors).

The actors and their proxies moved to `trainer.backends.ray`; their names still resolve here
for one release, with a `DeprecationWarning` (`trainer._moved.NAME_MOVES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from skyrl_sdk.trainer._moved import moved_name
from skyrl_sdk.trainer.backends import ray as ray_backend
from skyrl_sdk.trainer.config import TrainConfig
from skyrl_sdk.trainer.loop import TrainingLoop, TrainResult

if TYPE_CHECKING:  # the old names of these resolve through `__getattr__`, with a warning
    from skyrl_sdk.trainer.backends.ray import (
        RayDataParallelLearner,
        RayEngine,
        RayHooks,
        RayLearner,
    )
    from skyrl_sdk.trainer.ray_envs import EnvPool

__all__ = ["RayTrainer", "run_ray"]


class RayTrainer(TrainingLoop):
    """The RL loop with its learner, engines and (with a pool) envs in Ray actors (Ray must be
    initialised; build it outside a running event loop): the loop of `backends.ray.build_ray`'s parts.

    `env_workers` overrides `distributed.env_workers`. `run()` trains and then stops every
    actor; `train()` leaves them up (to inspect them), and `close()` stops them.
    """

    learner: RayLearner | RayDataParallelLearner
    engine: RayEngine
    hooks: RayHooks

    def __init__(
        self,
        config: TrainConfig,
        *,
        resume: bool = False,
        num_engines: int = 1,
        env_workers: int | None = None,
        console: Console | None = None,
    ):
        parts = ray_backend.build_ray(
            config, resume=resume, num_engines=num_engines, env_workers=env_workers, console=console
        )
        self.env_pool: EnvPool | None = parts.hooks.env_pool
        """Where episodes' envs live (None: on the driver, as in one-process mode)."""
        super().__init__(
            config,
            parts.learner,
            parts.engine,
            run=parts.run,
            limits=parts.limits,
            hooks=parts.hooks,
        )

    def close(self) -> None:
        """Stop the learner, engine and env actors (safe to call more than once)."""
        self.hooks.close()


def run_ray(config: TrainConfig, *, resume: bool = False, num_engines: int = 1) -> TrainResult:
    """Train with Ray actors on a local cluster (started here if needed)."""
    ray_backend.init_local_ray()
    return RayTrainer(config, resume=resume, num_engines=num_engines).run()


def __getattr__(name: str) -> Any:
    """The names that moved out of this module (`trainer._moved.NAME_MOVES`), deprecated."""
    return moved_name(__name__, name)
