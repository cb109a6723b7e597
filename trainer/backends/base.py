"""What the loop needs of a backend: a learner, an engine, and a few hooks, built once.

A backend is a function that builds `Parts` for one run (`backends.local.build_local`,
`backends.ray.build_ray`, `backends.tinker.build_tinker`); `TrainingLoop(config, learner,
engine, run=..., limits=..., hooks=...)` is assembled from them. The loop calls the learner
(`PolicyLearner`) from a worker thread, samples every episode from the engine
(`PolicyEngine`), and calls the backend's `BackendHooks` where a backend adds to a step's
metrics, the summary, a checkpoint, or the end of the run.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import Policy
from skyrl_sdk.agents.rollout import RolloutLimits
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.learner import LearnerStats
from skyrl_sdk.trainer.run import RunState


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


class PolicyEngine(Policy, Protocol):
    """What the loop samples from (`LocalEngine`, `VLLMEngine`, Ray engine actors, a Tinker
    sampling client): a `Policy` with token ids whose weights the learner replaces."""

    policy_version: int
    """Version of the weights the engine serves (or has queued, for actors)."""

    @property
    def renderer(self) -> ChatRenderer:
        """The chat template the engine's tokenizer uses (never None: the loop trains on
        token ids)."""
        ...

    def update_weights(self, weights: Any, version: int) -> None:
        """Serve `weights` (from `PolicyLearner.engine_weights`) as `version` from now on;
        episodes in flight continue (tokens decoded later carry the new version)."""
        ...

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """Block until weights of at least `version` are served; False on timeout."""
        ...


class RunOutcome(enum.Enum):
    """How `train` ended (a backend may report it, e.g. to close a remote session)."""

    SUCCESS = "success"
    ERRORED = "errored"
    INTERRUPTED = "interrupted"


class BackendHooks:
    """What a backend adds to the loop besides its learner and engine. Every hook of this
    base class does nothing (the local backend's); a backend overrides the ones it needs."""

    def make_env(self) -> Any | None:
        """A fresh env for one episode (None: the loop builds one in this process)."""
        return None

    def add_metrics(self, metrics: MutableMapping[str, Any]) -> None:
        """Add the backend's own metrics of the step just trained, drop those it lacks."""

    def summary(self) -> Mapping[str, str | None]:
        """Keys the backend adds to `summary.json` (where it trained, its last paths)."""
        return {}

    def checkpoint_saved(self, path: Path, step: int) -> None:
        """The loop saved the checkpoint `path` after `step` steps."""

    async def finish(self, outcome: RunOutcome) -> None:
        """Called once when `train` ends, after the engine and outputs are closed."""

    def close(self) -> None:
        """Stop what the backend started (`TrainingLoop.run` calls it after training;
        `train` leaves it to the caller). Safe to call more than once."""


@dataclass(frozen=True)
class Parts:
    """What a backend builds, once, for one run."""

    run: RunState
    """The run (restored from its checkpoint under `--resume`)."""
    learner: PolicyLearner
    """Trains the policy and hands out its weights."""
    engine: PolicyEngine
    """Samples episodes, serving the learner's weights."""
    limits: RolloutLimits
    """Turn and token limits of every episode (the context is the engine's by default)."""
    hooks: BackendHooks
    """The backend's additions to the loop."""
