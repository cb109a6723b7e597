"""The local backend: a torch learner and an inference engine in this process.

The learner (`Learner`) trains one copy of the model; the engine (`rollout.engine`: a
`LocalEngine` thread, or vLLM whose engine core runs in a child process, `build_engine`)
samples from another and receives the learner's weights in flight after every step.
`build_local` builds both once, restores the learner from the run's checkpoint under
`--resume`, and brings the engine to the learner's version (`AsyncTrainer` is the loop of
these parts).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from rich.console import Console

from skyrl_sdk.agents.engine.frontend import LocalEngine
from skyrl_sdk.trainer.backends.base import BackendHooks, Parts
from skyrl_sdk.trainer.config import EngineKind, TrainConfig
from skyrl_sdk.trainer.learner import Learner, LearnerSettings
from skyrl_sdk.trainer.models import load_model
from skyrl_sdk.trainer.run import RunState, rollout_limits

if TYPE_CHECKING:
    from skyrl_sdk.agents.vllm_engine import VLLMEngine


@dataclass(frozen=True)
class LocalParts(Parts):
    """The local backend's parts, with the tokenizer of the model both copies share."""

    tokenizer: Any
    """The model's tokenizer (the engine's renderer uses it)."""


def build_local(
    config: TrainConfig,
    *,
    resume: bool = False,
    console: Console | None = None,
    learner: Learner | None = None,
    engine: LocalEngine | VLLMEngine | None = None,
) -> LocalParts:
    """The learner and engine `config` names, or `learner` and `engine` as given (both at
    version 0 with the same weights: e.g. the GPU check's FSDP2 learner and a device
    engine), over a `RunState` of `config` (restored under `resume`)."""
    if config.trainer.torch_threads:
        torch.set_num_threads(config.trainer.torch_threads)
    run = RunState(config, resume=resume, console=console)
    # The learner trains one copy of the model; the engine samples from another.
    model, tokenizer = load_model(config.model, seed=config.seed)
    # The engine's copy is taken before the learner wraps `model`: peft's LoRA wrapping
    # changes the model in place, and the engine loads merged (plain) weights.
    engine_model = None if engine is not None else copy.deepcopy(model)
    if learner is None:
        learner = Learner(model, LearnerSettings.from_config(config, tokenizer))
    if resume and (state := run.load_checkpoint()) is not None:
        learner.load_state_dict(state.learner)
        run.resume_at(state, f"policy version {learner.version}")
    if engine is None:
        assert engine_model is not None
        engine_model = engine_model.eval().requires_grad_(False)
        engine = build_engine(config, engine_model, tokenizer, run.run_dir)
    if learner.version != 0:
        engine.update_weights(learner.engine_weights(), learner.version)
        engine.wait_for_version(learner.version)
    limits = rollout_limits(config, engine.max_context_tokens)
    return LocalParts(run, learner, engine, limits, BackendHooks(), tokenizer)


# -- the inference engine -----------------------------------------------------------------

ENGINE_MODEL_DIR = "engine_model"
"""Run subdirectory `engine: vllm` starts from: the initial model, its tokenizer in
`tokenizer/` (next to a Qwen2 `config.json`, transformers would reload the `lookup-tiny`
word-level tokenizer as a Qwen2 BPE one and mangle every text)."""


def build_engine(
    config: TrainConfig, model: Any, tokenizer: Any, run_dir: Path
) -> LocalEngine | VLLMEngine:
    """The inference engine `config.rollout.engine` names, at policy version 0 with the
    weights of `model` (the initial model; the trainer pushes the learner's from then on).

    `vllm` saves `model` and `tokenizer` under `run_dir / ENGINE_MODEL_DIR` and starts vLLM
    there. Its logprobs are taken after temperature (`processed_logprobs`), as `LocalEngine`
    reports them and the learner computes them; with `top_p` or `top_k` they are also
    renormalised over the kept tokens, where `LocalEngine`'s are not."""
    rollout = config.rollout
    name = f"{rollout.engine.value}:{config.model.source.value}"
    if rollout.engine is EngineKind.LOCAL:
        return LocalEngine(
            model, tokenizer, max_batch_size=rollout.engine_batch_size, name=name, policy_version=0
        )
    from skyrl_sdk.agents.vllm_engine import VLLMEngine  # imports vllm itself only when started

    path = run_dir / ENGINE_MODEL_DIR
    model.save_pretrained(path)
    tokenizer.save_pretrained(path / "tokenizer")
    engine_args: dict[str, Any] = {
        "tokenizer": str(path / "tokenizer"),
        "dtype": config.model.dtype,
        "seed": config.seed,
        "max_num_seqs": rollout.engine_batch_size,
        "enforce_eager": rollout.vllm_enforce_eager,
        "gpu_memory_utilization": rollout.vllm_gpu_memory_utilization,
        "logprobs_mode": "processed_logprobs",
    }
    if rollout.max_context_tokens:
        engine_args["max_model_len"] = rollout.max_context_tokens
    return VLLMEngine(path, name=name, policy_version=0, **engine_args)
