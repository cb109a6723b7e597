"""`AsyncTrainer`: the RL loop (`trainer.loop`) with a torch learner and an inference engine in
this process: generation and learning at the same time, with bounded staleness.

The learner (`Learner`) trains one copy of the model; the engine (`rollout.engine`: a
`LocalEngine` thread, or vLLM whose engine core runs in a child process, `build_engine`)
samples from another and receives the learner's weights in flight after every step. The steps
of the loop, the staleness bound, metrics, checkpoints and `summary.json` are
`trainer.loop.TrainingLoop`'s; this module only builds the parts.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from rich.console import Console

from skyrl_sdk.agents.local_engine import LocalEngine
from skyrl_sdk.trainer.config import EngineKind, TrainConfig
from skyrl_sdk.trainer.learner import Learner, LearnerSettings
from skyrl_sdk.trainer.loop import (  # re-exported: the loop's helpers were first defined here
    Group,
    SeededPolicy,
    TrainingLoop,
    TrainResult,
    build_batch,
    make_env,
    open_run_outputs,
    pick_batch,
    rollout_limits,
    sampling_params,
    seed_everything,
    step_metrics,
)
from skyrl_sdk.trainer.models import load_model

if TYPE_CHECKING:
    from skyrl_sdk.agents.vllm_engine import VLLMEngine

__all__ = [
    "ENGINE_MODEL_DIR",
    "AsyncTrainer",
    "Group",
    "SeededPolicy",
    "TrainResult",
    "build_batch",
    "build_engine",
    "make_env",
    "open_run_outputs",
    "pick_batch",
    "sampling_params",
    "seed_everything",
    "step_metrics",
]


class AsyncTrainer(TrainingLoop):
    """Trains a policy on an env with in-flight weight updates and bounded staleness."""

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
        if config.trainer.torch_threads:
            torch.set_num_threads(config.trainer.torch_threads)
        super().__init__(config, resume=resume, console=console)
        # The learner trains one copy of the model; the engine samples from another.
        model, self.tokenizer = load_model(config.model, seed=config.seed)
        # The engine's copy is taken before the learner wraps `model`: peft's LoRA wrapping
        # changes the model in place, and the engine loads merged (plain) weights.
        engine_model = None if engine is not None else copy.deepcopy(model)
        if learner is None:
            learner = Learner(model, LearnerSettings.from_config(config, self.tokenizer))
        self.learner = learner
        if resume and (state := self._load_checkpoint()) is not None:
            self.learner.load_state_dict(state.learner)
            self._resume_at(state, f"policy version {self.learner.version}")
        if engine is None:
            assert engine_model is not None
            engine_model = engine_model.eval().requires_grad_(False)
            engine = build_engine(config, engine_model, self.tokenizer, self.run_dir)
        self.engine = engine
        if self.learner.version != 0:
            self.engine.update_weights(self.learner.engine_weights(), self.learner.version)
            self.engine.wait_for_version(self.learner.version)
        self.policy = SeededPolicy(self.engine, config.seed)
        self.limits = rollout_limits(config, self.engine.max_context_tokens)
        self._open_outputs()


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
