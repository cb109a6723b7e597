"""Checkpoints: everything needed to continue a killed run exactly.

`<run>/checkpoints/step_000010/state.pt` holds the learner (trainable weights, optimizer,
scheduler, policy version), the data cursor (which groups were trained on), the step, and the
RNG states. A checkpoint is written to a temporary directory and renamed into place, and
`latest` is replaced atomically after it, so a kill at any moment leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class CheckpointState:
    """What a checkpoint restores."""

    step: int
    """Optimizer steps completed."""
    learner: dict[str, Any]
    """`Learner.state_dict()`."""
    cursor: dict[str, Any]
    """`DataCursor.state_dict()`."""
    rng: dict[str, Any]
    """Python, numpy and torch RNG states."""


def capture_rng() -> dict[str, Any]:
    """The process's RNG states."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


class Checkpointer:
    """Saves, lists, prunes and loads checkpoints under `<run>/checkpoints`."""

    def __init__(self, run_dir: str | Path, keep: int = 2):
        self.root = Path(run_dir) / "checkpoints"
        self.keep = keep

    def save(self, state: CheckpointState) -> Path:
        """Write a checkpoint atomically and prune old ones; returns its directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"step_{state.step:06d}"
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        torch.save(
            {
                "step": state.step,
                "learner": state.learner,
                "cursor": state.cursor,
                "rng": state.rng,
            },
            tmp / "state.pt",
        )
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        pointer = self.root / ".latest.tmp"
        pointer.write_text(final.name)
        pointer.replace(self.root / "latest")
        self._prune()
        return final

    def latest(self) -> Path | None:
        """The newest complete checkpoint directory, if any."""
        pointer = self.root / "latest"
        if pointer.exists():
            path = self.root / pointer.read_text().strip()
            if (path / "state.pt").exists():
                return path
        done = sorted(p for p in self.root.glob("step_*") if (p / "state.pt").exists())
        return done[-1] if done else None

    def load(self, path: str | Path | None = None) -> CheckpointState | None:
        """Load `path` (default: the latest); None when there is none."""
        path = Path(path) if path is not None else self.latest()
        if path is None:
            return None
        data = torch.load(path / "state.pt", weights_only=False)
        return CheckpointState(data["step"], data["learner"], data["cursor"], data["rng"])

    def _prune(self) -> None:
        done = sorted(p for p in self.root.glob("step_*") if (p / "state.pt").exists())
        for old in done[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)


RESUMABLE_KEYS: tuple[str, ...] = (
    "out_dir",
    "trainer.steps",
    "trainer.checkpoint_every",
    "trainer.keep_checkpoints",
    "trainer.torch_threads",
    "trainer.step_timeout_s",
    "logging",
    "tinker.base_url",
    "tinker.api_key_env",
)
"""Config keys (or whole sections) a resumed run may change: how long to train, how often to
save, where to log and how to reach the endpoint. Any other change would continue the run as a
different experiment, so `--resume` refuses it."""

CONFIG_FILE = "config.yaml"
"""The run's config, written by the trainer into its run directory at every start."""


class ResumeConfigError(ValueError):
    """`--resume` was given a config that differs from the run's in keys that matter."""


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`"key: was A, now B"` for every leaf that differs, except `RESUMABLE_KEYS`."""
    before, after = _flatten(saved), _flatten(current)
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS):
            continue
        old, new = before.get(key, "(absent)"), after.get(key, "(absent)")
        if old != new:
            changes.append(f"{key}: was {old!r}, now {new!r}")
    return changes


def check_resume_config(run_dir: str | Path, current: dict[str, Any]) -> None:
    """Raise `ResumeConfigError` naming the differing keys when `--resume` would continue a
    checkpointed run with another config (`current`: the new config as JSON-mode data).

    Nothing to check when the run has no checkpoint or no saved config (it starts fresh).
    The saved config is validated again first, so fields added since it was written take
    their defaults instead of showing up as changes.
    """
    from skyrl_sdk.trainer.config import ConfigError, load_config

    run = Path(run_dir)
    saved_file = run / CONFIG_FILE
    if Checkpointer(run).latest() is None or not saved_file.is_file():
        return
    try:
        saved = load_config(saved_file).model_dump(mode="json")
    except ConfigError as e:
        raise ResumeConfigError(
            f"--resume: cannot read the run's {saved_file} ({e}); choose another out_dir"
        ) from None
    changes = config_changes(saved, current)
    if changes:
        raise ResumeConfigError(
            f"--resume would continue the run in {run} with a different config ("
            + "; ".join(changes)
            + "); use the run's config, or choose another out_dir"
        )
