"""`TinkerTrainer`: the RL loop (`trainer.loop`) of the Tinker backend's parts
(`trainer.backends.tinker`: the model behind a Tinker API endpoint).

`skyrl train CONFIG backend=tinker tinker.base_url=URL tinker.base_model=NAME` runs this loop.
The learner, the engine and the checks moved to `trainer.backends.tinker`; their names still
resolve here for one release, with a `DeprecationWarning` (`trainer._moved.NAME_MOVES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from skyrl_sdk.trainer._moved import moved_name
from skyrl_sdk.trainer.backends import tinker as tinker_backend
from skyrl_sdk.trainer.config import TrainConfig
from skyrl_sdk.trainer.loop import TrainingLoop

if TYPE_CHECKING:  # the old names of these resolve through `__getattr__`, with a warning
    from skyrl_sdk.trainer.backends.tinker import TinkerEngine, TinkerHooks, TinkerLearner

__all__ = ["TinkerTrainer"]


class TinkerTrainer(TrainingLoop):
    """Trains a policy through a Tinker API endpoint with the local trainer's RL loop: the loop
    of `backends.tinker.build_tinker`'s parts."""

    learner: TinkerLearner
    engine: TinkerEngine
    hooks: TinkerHooks

    def __init__(
        self,
        config: TrainConfig,
        *,
        resume: bool = False,
        console: Console | None = None,
    ):
        parts = tinker_backend.build_tinker(config, resume=resume, console=console)
        self.service = parts.hooks.service
        """The `tinker.ServiceClient` of the endpoint."""
        self.base_model = parts.learner.base_model
        """The model the endpoint trains (`tinker.base_model`)."""
        super().__init__(
            config,
            parts.learner,
            parts.engine,
            run=parts.run,
            limits=parts.limits,
            hooks=parts.hooks,
        )


def __getattr__(name: str) -> Any:
    """The names that moved out of this module (`trainer._moved.NAME_MOVES`), deprecated."""
    return moved_name(__name__, name)
