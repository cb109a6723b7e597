"""`model.init_from`: start a run (or an evaluation) from one of our checkpoints.

A checkpoint (`trainer.checkpoint`) holds the learner's trainable weights only: all of them
for full-weight training, the LoRA adapters otherwise. `apply_checkpoint` puts them on top of
the model its run trained (`model.source`): full weights are loaded as they are; adapters are
loaded into a `peft` wrapper built with the run's own `model.lora` (read from the run's
`config.yaml`) and merged, so what comes back is a plain model with the checkpoint's policy,
on which a new run may train new adapters or all weights. A checkpoint whose run itself
started from another (`init_from` in its config) has that one applied first, so SFT -> RL ->
RL chains load as they were trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from skyrl_sdk.trainer.checkpoint import CONFIG_FILE, Checkpointer
from skyrl_sdk.trainer.config import ModelConfig, ModelSource, TrainConfig, load_config

MAX_CHAIN = 16
"""How many `init_from` links a chain may have (a loop of runs would otherwise recurse)."""

_SEEDED_SOURCES = (ModelSource.TINY, ModelSource.LOOKUP_TINY)
"""Sources built locally from the run's seed: the same source with another seed is another
model."""


class InitFromError(ValueError):
    """`model.init_from` names no checkpoint, or one of another model."""


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A checkpoint found from what `init_from` named."""

    state_file: Path
    """Its `state.pt`."""
    run_config: TrainConfig | None
    """The config of the run that wrote it (None: the run directory has no `config.yaml`)."""


def resolve_checkpoint(path: str | Path) -> ResolvedCheckpoint:
    """The checkpoint `path` names: a `state.pt`, a `step_N` directory, a run's `checkpoints`
    directory or a run directory (these two: the latest checkpoint); `InitFromError` if none."""
    p = Path(path)
    if p.is_file():
        state = p
    elif (p / "state.pt").is_file():
        state = p / "state.pt"
    else:
        run = p.parent if p.name == "checkpoints" else p
        latest = Checkpointer(run).latest()
        if latest is None:
            raise InitFromError(
                f"model.init_from: no checkpoint at {str(path)!r} (a run directory, its "
                "checkpoints/ directory, a step_N directory or a state.pt)"
            )
        state = latest / "state.pt"
    run_dir = state.parent.parent.parent
    config_file = run_dir / CONFIG_FILE
    config = load_config(config_file) if config_file.is_file() else None
    return ResolvedCheckpoint(state, config)


def apply_checkpoint(model: Any, init_from: str | Path, cfg: ModelConfig, seed: int) -> Any:
    """`model` (built from `cfg` with `seed`, without `init_from`) with the checkpoint's
    weights, as a plain model (adapters merged); in the mode `model` was in."""
    return _apply(model, init_from, cfg, seed, depth=0)


def _apply(model: Any, init_from: str | Path, cfg: ModelConfig, seed: int, depth: int) -> Any:
    if depth >= MAX_CHAIN:
        raise InitFromError(f"model.init_from: a chain of more than {MAX_CHAIN} checkpoints")
    found = resolve_checkpoint(init_from)
    saved = found.run_config
    if saved is not None:
        _check_same_model(saved, cfg, seed, found.state_file)
        if saved.model.init_from:
            model = _apply(model, saved.model.init_from, cfg, seed, depth + 1)
    weights = torch.load(found.state_file, weights_only=False)["learner"]["weights"]
    training = model.training
    lora = saved.model.lora if saved is not None else None
    if any("lora_" in k for k in weights):
        if lora is None or not lora.enabled:
            raise InitFromError(
                f"model.init_from: {found.state_file} holds LoRA adapters but its run's "
                f"{CONFIG_FILE} (which gives their settings) is missing or has lora off"
            )
        model = _merged(model, weights, lora)
    else:
        _load(model, weights, adapters=False)
    return model.train(training)


def _merged(model: Any, weights: dict[str, torch.Tensor], lora: Any) -> Any:
    """Adapters `weights` merged into `model` (a wrapper built as the run built it)."""
    from skyrl_sdk.trainer.learner import wrap_lora

    # The adapters' random initialisation is overwritten at once; it must not move the
    # process's RNG (the run's sampling and shuffles depend on it).
    with torch.random.fork_rng(devices=[]):
        wrapped = wrap_lora(model, lora.model_copy(update={"seed": None, "dropout": 0.0}))
    _load(wrapped, weights, adapters=True)
    return wrapped.merge_and_unload()


def _load(model: Any, weights: dict[str, torch.Tensor], *, adapters: bool) -> None:
    """Load `weights` (all trainable weights, or only the adapters) into `model`, strictly."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    params = {n for n, _ in model.named_parameters()}
    lost = sorted(k for k in missing if k in params and ("lora_" in k or not adapters))
    if unexpected or lost:
        raise InitFromError(
            f"model.init_from: the checkpoint does not fit the model (unexpected "
            f"{sorted(unexpected)[:3]}, missing {lost[:3]})"
        )


def _check_same_model(saved: TrainConfig, cfg: ModelConfig, seed: int, where: Path) -> None:
    """Refuse a checkpoint of another model: its weights (or its adapters' base) differ."""
    fields = ["source"]
    if cfg.source is ModelSource.PRETRAINED:
        fields.append("path")
    if cfg.source in _SEEDED_SOURCES:
        fields += ["hidden_size", "num_layers"]
    if cfg.source is ModelSource.LOOKUP_TINY:
        fields.append("pretrain_steps")
    diffs = [
        f"{f}: {getattr(saved.model, f)!r} there, {getattr(cfg, f)!r} here"
        for f in fields
        if getattr(saved.model, f) != getattr(cfg, f)
    ]
    if cfg.source in _SEEDED_SOURCES and saved.seed != seed:
        diffs.append(
            f"seed (it builds the {cfg.source.value} model): {saved.seed} there, {seed} here"
        )
    if diffs:
        raise InitFromError(
            f"model.init_from: {where} was trained on another model (" + "; ".join(diffs) + ")"
        )
