"""A run before its parts: what every backend needs before it builds a learner and an engine.

`RunState(config, resume=...)` refuses to continue a checkpointed run under another config
(`ResumeConfigError`, before any model loads), seeds the global generators, reads the env's
task rows once (`trainer.run_env`), records which tasks the run trains on, and holds the data
order (`DataCursor`) and the checkpoints. A backend (`trainer.backends`) then builds its
learner and engine, restores them from `load_checkpoint()` and continues the run at its step
with `resume_at`; the loop (`trainer.loop.TrainingLoop`) is assembled from the two.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from skyrl_gym.tasks import TaskRow, seed_task
from skyrl_sdk.agents.policy import SamplingParams
from skyrl_sdk.agents.rollout import RolloutLimits
from skyrl_sdk.agents.trajectory import TrajectoryWriter
from skyrl_sdk.trainer import heldout
from skyrl_sdk.trainer.checkpoint import (
    Checkpointer,
    CheckpointState,
    ResumeConfigError,
    capture_rng,
    check_resume_config,
    restore_rng,
)
from skyrl_sdk.trainer.config import TrainConfig
from skyrl_sdk.trainer.data import DataCursor
from skyrl_sdk.trainer.metrics import MultiSink, build_sinks, truncate_metrics
from skyrl_sdk.trainer.run_env import (
    TASK_IDS_FILE,
    SeedStream,
    probe_tasks,
    require_env_id,
    resolve_env_kwargs,
    task_ids_record,
)


class RunState:
    """The run's config, tasks, data order and checkpoints, set up before its parts."""

    def __init__(
        self, config: TrainConfig, *, resume: bool = False, console: Console | None = None
    ):
        """Set up the run; with `resume`, first refuse (`ResumeConfigError`, naming the
        differences) to continue a checkpointed run under another config, before any
        backend loads a model."""
        self.config = config
        """The run's config."""
        self.console = console or Console()
        """Where notices go."""
        self.run_dir = Path(config.out_dir)
        """Where metrics, trajectories, checkpoints and the config are."""
        self.resume = resume
        """Whether the run continues from its latest checkpoint (`--resume`)."""
        require_env_id(config)
        if resume:
            check_resume_config(self.run_dir, config.model_dump(mode="json"))
        seed_everything(config.seed)
        self.env_kwargs: dict[str, Any] = resolve_env_kwargs(config)
        """What every env of the run is built with: `env.kwargs`, with the rows of
        `env.tasks` (or of a path in `env.kwargs.tasks`) read once."""
        self.tasks: list[TaskRow] = probe_tasks(config, self.env_kwargs)
        """The env's task list; group i plays tasks[cursor.task_index(i)] (empty: it is
        played by seeds, group i plays `seed_task(seeds.seed(i))`)."""
        self.seeds: SeedStream | None = (
            None if self.tasks else SeedStream(config.seed, config.heldout.seed_offset)
        )
        """The seed of each group when the env has no tasks (None: it has tasks)."""
        self.heldout_tasks: list[TaskRow] | None = (
            None
            if config.heldout.env_kwargs is None
            else heldout.heldout_tasks(config, self.env_kwargs)
        )
        """The episodes of every held-out evaluation (None: held-out evaluation is off)."""
        self.cursor = DataCursor(len(self.tasks) or 1, config.seed)
        """The run's data order and the groups consumed so far."""
        self.start_step = 0
        """The step the run starts at (the checkpoint's under `resume_at`, else 0)."""
        self.resumed_from: int | None = None
        """Step of the checkpoint this process started from (None: fresh run)."""
        self.checkpointer = Checkpointer(self.run_dir, keep=config.trainer.keep_checkpoints)
        """Saves and finds the run's checkpoints."""
        self._check_task_ids()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.sampling = sampling_params(config)
        """The sampling settings of every turn."""

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

    def load_checkpoint(self) -> CheckpointState | None:
        """The run's latest checkpoint, for `--resume` (None, with a notice: start fresh)."""
        state = self.checkpointer.load()
        if state is None:
            self.console.print("[yellow]--resume: no checkpoint found; starting fresh[/yellow]")
        return state

    def resume_at(self, state: CheckpointState, detail: str) -> None:
        """Continue from `state`'s step, data position and RNG (the backend has restored its
        learner from `state.learner`)."""
        self.cursor.load_state_dict(state.cursor)
        restore_rng(state.rng)
        self.start_step = self.resumed_from = state.step
        self.console.print(f"resumed from step {state.step} ({detail})")

    def save_checkpoint(self, step: int, learner_state: Mapping[str, Any]) -> Path:
        """Save the learner's state, the data cursor, the RNG states and `step`."""
        state = CheckpointState(step, dict(learner_state), self.cursor.state_dict(), capture_rng())
        return self.checkpointer.save(state)

    def open_outputs(self) -> tuple[MultiSink, TrajectoryWriter | None]:
        """Open the metrics sinks and trajectory file (after any resume: `resumed_from`)."""
        return open_run_outputs(self.config, self.run_dir, self.resumed_from, self.console)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


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
