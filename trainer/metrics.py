"""Metric sinks: one flat dict per training step, to the console, JSONL, TensorBoard, W&B.

A sink is anything with `log(metrics: dict, step: int)` and `close()`. TensorBoard and W&B are
imported only when asked for; a missing TensorBoard is a warning (the run goes on), a missing
W&B is an error (the user explicitly asked for it).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from skyrl_sdk.trainer.config import LoggingConfig

Metrics = Mapping[str, Any]
"""Flat metrics of one step: numbers, plus a few lists (group indices, task ids)."""


class MetricsSink(Protocol):
    """Receives every step's metrics."""

    def log(self, metrics: Metrics, step: int) -> None:
        """Record one step."""
        ...

    def close(self) -> None:
        """Flush and release (idempotent)."""
        ...


class ConsoleSink:
    """One compact rich line per step."""

    COLUMNS = (
        ("reward/mean", "reward", "{:.3f}"),
        ("success/rate", "success", "{:.0%}"),
        ("loss/total", "loss", "{:+.4f}"),
        ("policy/entropy", "ent", "{:.3f}"),
        ("policy/kl_sampler", "kl", "{:.4f}"),
        ("staleness/max", "stale", "{:d}"),
        ("sync/logprob_gap_max", "sync", "{:.1e}"),
        ("throughput/tokens_per_s", "tok/s", "{:.0f}"),
        ("time/step_s", "step_s", "{:.2f}"),
    )

    def __init__(self, console: Console | None = None):
        self.console = console or Console()

    def log(self, metrics: Metrics, step: int) -> None:
        parts = [f"[bold]step {step:>4}[/bold]"]
        for key, label, fmt in self.COLUMNS:
            if key in metrics:
                value = metrics[key]
                parts.append(f"{label} {fmt.format(int(value) if fmt.endswith('d}') else value)}")
        self.console.print("  ".join(parts), highlight=False)

    def close(self) -> None:
        pass


class JsonlSink:
    """`metrics.jsonl`: one JSON object per step, flushed each line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def log(self, metrics: Metrics, step: int) -> None:
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class TensorBoardSink:
    """Scalars to TensorBoard event files (needs the `tensorboard` package)."""

    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # raises ImportError without tensorboard

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, metrics: Metrics, step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Scalars to Weights & Biases."""

    def __init__(self, project: str, run_dir: str | Path, config: Mapping[str, Any]):
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                "logging.wandb=true needs wandb: pip install 'skyrl-sdk[wandb]'"
            ) from e
        self.run = wandb.init(project=project, dir=str(run_dir), config=dict(config))

    def log(self, metrics: Metrics, step: int) -> None:
        self.run.log({k: v for k, v in metrics.items() if isinstance(v, int | float)}, step=step)

    def close(self) -> None:
        self.run.finish()


class MultiSink:
    """Fans one step out to several sinks."""

    def __init__(self, sinks: Sequence[MetricsSink]):
        self.sinks = list(sinks)

    def log(self, metrics: Metrics, step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def build_sinks(
    cfg: LoggingConfig,
    run_dir: Path,
    config_dump: Mapping[str, Any],
    console: Console | None = None,
) -> MultiSink:
    """The sinks `cfg` asks for, writing under `run_dir`."""
    sinks: list[MetricsSink] = []
    if cfg.console:
        sinks.append(ConsoleSink(console))
    if cfg.jsonl:
        sinks.append(JsonlSink(run_dir / "metrics.jsonl"))
    if cfg.tensorboard:
        try:
            sinks.append(TensorBoardSink(run_dir / "tensorboard"))
        except ImportError:
            warnings.warn(
                "logging.tensorboard=true but tensorboard is not installed; skipping", stacklevel=2
            )
    if cfg.wandb:
        sinks.append(WandbSink(cfg.wandb_project, run_dir, config_dump))
    return MultiSink(sinks)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a `metrics.jsonl` (a partial last line from a kill is skipped)."""
    rows = []
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n") and line.strip():
                rows.append(json.loads(line))
    return rows


def truncate_metrics(path: str | Path, last_step: int) -> None:
    """Keep only rows with `step <= last_step` (a resumed run redoes the later ones)."""
    path = Path(path)
    if not path.exists():
        return
    kept = [r for r in read_metrics(path) if r["step"] <= last_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    tmp.replace(path)
