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
