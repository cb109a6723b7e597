"""`AsyncTrainer`: the RL loop (`trainer.loop`) of the local backend's parts
(`trainer.backends.local`): a torch learner and an inference engine in this process,
generation and learning at the same time, with bounded staleness.

The names this module used to re-export from the loop, and `build_engine` /
`ENGINE_MODEL_DIR`, still resolve here for one release, with a `DeprecationWarning`
(`trainer._moved.NAME_MOVES` says where each lives now).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console

from skyrl_sdk.agents.engine.frontend import LocalEngine
from skyrl_sdk.trainer._moved import moved_name
from skyrl_sdk.trainer.backends.local import build_local
from skyrl_sdk.trainer.config import TrainConfig
from skyrl_sdk.trainer.learner import Learner
from skyrl_sdk.trainer.loop import TrainingLoop

if TYPE_CHECKING:
    from skyrl_sdk.agents.vllm_engine import VLLMEngine

__all__ = ["AsyncTrainer"]


class AsyncTrainer(TrainingLoop):
    """Trains a policy on an env with in-flight weight updates and bounded staleness: the loop
    of `build_local`'s parts."""

    learner: Learner
    engine: LocalEngine | VLLMEngine

    def __init__(
        self,
        config: TrainConfig,
        *,
        resume: bool = False,
        console: Console | None = None,
        learner: Learner | None = None,
        engine: LocalEngine | VLLMEngine | None = None,
    ):
        """Build the learner and engine `config` names, or train `learner` and sample from
        `engine` (both at version 0 with the same weights: e.g. the GPU check's FSDP2
        learner and a device engine)."""
        parts = build_local(config, resume=resume, console=console, learner=learner, engine=engine)
        self.tokenizer = parts.tokenizer
        """The model's tokenizer."""
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
