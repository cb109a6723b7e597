"""Data-parallel learners: FSDP2 (`torch.distributed.fsdp.fully_shard`) and DeepSpeed ZeRO.

Both subclass `trainer.learner.Learner` and reuse its loss code unchanged (logprobs,
truncated IS, PPO/IS loss, KL, entropy, micro-batch reduction); only sharding, backward and
the optimizer step differ. Run one process per rank (`torchrun --nproc_per_node N`); on CPU
the process group is gloo, on GPUs NCCL.

Data: every rank calls `train_step` with the same global batch; `shard_batch` gives each rank
an equal slice (short ranks are padded with a copy of a sample at advantage 0, so every
rank runs the same number of forward/backward passes, which FSDP2's collectives require).
Gradients are averaged over ranks, i.e. the batch loss is the mean of the ranks' reductions
(as in DDP), and the returned `LearnerStats` are this rank's.

Not supported here: LoRA, and (DeepSpeed) ZeRO-3 weight export. `engine_weights()` returns
full (unsharded) weights on every rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from agents.trajectory import TrainingSample
from trainer.config import AlgorithmConfig, LoRAConfig, OptimConfig
from trainer.learner import Learner, LearnerStats, _schedule


def init_process_group(backend: str | None = None, timeout_s: float = 120.0) -> tuple[int, int]:
    """Join the torchrun process group (gloo on CPU, NCCL with CUDA); returns (rank, world)."""
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def shard_batch(
    samples: Sequence[TrainingSample], advantages: Sequence[float], rank: int, world: int
) -> tuple[list[TrainingSample], list[float]]:
    """This rank's equal share of a global batch (strided); short shares are padded with a
    copy of their first sample at advantage 0 (no policy gradient)."""
    if len(samples) != len(advantages) or not samples:
        raise ValueError("need one advantage per sample, and at least one sample")
    per_rank = math.ceil(len(samples) / world)
    local = list(samples[rank::world])
    adv = [float(a) for a in advantages[rank::world]]
    filler = local[0] if local else samples[0]
    while len(local) < per_rank:
        local.append(filler)
        adv.append(0.0)
    return local, adv


class _DataParallel(Learner):
    """Shared by both backends: shards the global batch before the single-process step."""

    rank: int
    world_size: int

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """One optimizer step on the global batch (identical on every rank)."""
        local, adv = shard_batch(samples, advantages, self.rank, self.world_size)
        return super().train_step(local, adv)


def _check_supported(lora: LoRAConfig | None) -> None:
    if lora is not None and lora.enabled:
        raise ValueError("LoRA is not supported by the distributed learners")


class FSDPLearner(_DataParallel):
    """FSDP2: `fully_shard` on every decoder layer and on the root; AdamW on DTensor shards."""

    def __init__(
        self,
        model: Any,
        *,
        algorithm: AlgorithmConfig,
        optim: OptimConfig,
        lora: LoRAConfig | None = None,
        temperature: float = 1.0,
        pad_token_id: int = 0,
        total_steps: int = 1,
        micro_batch_size: int = 64,
    ):
        from torch.distributed.fsdp import fully_shard

        _check_supported(lora)
        self.rank, self.world_size = init_process_group()
        super().__init__(
            model,
            algorithm=algorithm,
            optim=optim,
            temperature=temperature,
            pad_token_id=pad_token_id,
            total_steps=total_steps,
            micro_batch_size=micro_batch_size,
        )
        for layer in _decoder_layers(self.model):
            fully_shard(layer)
        fully_shard(self.model)
        # Sharding replaced the parameters with DTensors: the optimizer must be rebuilt.
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _schedule(optim.schedule, optim.warmup_steps, total_steps)
        )

    @torch.no_grad()
    def engine_weights(self) -> dict[str, torch.Tensor]:
        """Full weights gathered from the shards (a collective: call on every rank)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        return {
            k: v.detach().clone()
            for k, v in get_model_state_dict(self.model, options=options).items()
        }


class DeepSpeedLearner(_DataParallel):
    """DeepSpeed ZeRO stage 0-2 around the learner's own AdamW (no compiled ops needed).

    Each mini-batch runs one `engine.backward` per micro-batch and one `engine.step`; set
    `micro_batch_size` to at least the per-rank batch for ZeRO 1 and 2 (one backward per
    step), which is what DeepSpeed's gradient partitioning expects with
    `gradient_accumulation_steps: 1`.
    """

    def __init__(
        self,
        model: Any,
        *,
        algorithm: AlgorithmConfig,
        optim: OptimConfig,
        lora: LoRAConfig | None = None,
        temperature: float = 1.0,
        pad_token_id: int = 0,
        total_steps: int = 1,
        micro_batch_size: int = 64,
        zero_stage: int = 0,
    ):
        import deepspeed

        _check_supported(lora)
        if zero_stage not in (0, 1, 2):
            raise ValueError("DeepSpeedLearner supports ZeRO stages 0, 1 and 2")
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        deepspeed.init_distributed(dist_backend=backend, verbose=False)
        self.rank, self.world_size = init_process_group(backend)
        super().__init__(
            model,
            algorithm=algorithm,
            optim=optim,
            temperature=temperature,
            pad_token_id=pad_token_id,
            total_steps=total_steps,
            micro_batch_size=micro_batch_size,
        )
        config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": zero_stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        if optim.grad_clip is not None:
            config["gradient_clipping"] = optim.grad_clip
        # Our AdamW goes in as the client optimizer (no DeepSpeedCPUAdam JIT build); our
        # LambdaLR keeps stepping once per batch in `train_step`, so it is not handed over.
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=self.model, optimizer=self.optimizer, config=config
        )
        self.engine = engine
        self.model = engine
        self.optimizer = ds_optimizer

    def _backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss)

    def _clip_and_step(self) -> float:
        self.engine.step()  # clips (gradient_clipping), steps, zeroes the gradients
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    @torch.no_grad()
    def engine_weights(self) -> dict[str, torch.Tensor]:
        """Full weights (ZeRO 0-2 keep a full copy of the parameters on every rank)."""
        return {k: v.detach().clone() for k, v in self.engine.module.state_dict().items()}


def _decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (`model.model.layers`)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []
