"""Data-parallel learners: FSDP2 (`torch.distributed.fsdp.fully_shard`) and DeepSpeed ZeRO.

Both subclass `trainer.learner.Learner` and reuse its loss code unchanged (logprobs,
truncated IS, PPO/IS loss, KL, entropy, micro-batch reduction); only sharding, backward and
the optimizer step differ. Run one process per rank: `torchrun --nproc_per_node N`, or Ray
actors (`trainer.backends.ray`, `distributed.strategy`); on CPU the process group is gloo, on
GPUs NCCL.

Data: with `train_step` every rank passes the same global batch and `shard_batch` gives each
rank an equal slice (short ranks are padded with a copy of a sample at advantage 0, so every
rank runs the same number of forward/backward passes, which FSDP2's collectives require);
with `train_shard` the caller has already split the batch (the Ray proxy sends each rank only
its slice). Gradients are averaged over ranks, i.e. the batch loss is the mean of the ranks'
reductions (as in DDP), and the returned `LearnerStats` are this rank's (`combine_stats`
merges them).

Checkpoints: `state_dict()` is unsharded and keyed exactly like the single-process
`Learner`'s (full weights, full AdamW moments per parameter index, scheduler, version), so a
checkpoint moves between world sizes and backends, and `AsyncTrainer` can restore it into its
own `Learner` before the ranks load it. Both are collectives: call them on every rank.

Not supported here: LoRA, and (DeepSpeed) ZeRO-3. `engine_weights()` returns full
(unsharded) weights on every rank.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.config import LoRAConfig
from skyrl_sdk.trainer.learner import Learner, LearnerSettings, LearnerStats, lr_schedule


def init_process_group(backend: str | None = None, timeout_s: float = 120.0) -> tuple[int, int]:
    """Join the process group from the environment (`MASTER_ADDR`, `MASTER_PORT`, `RANK`,
    `WORLD_SIZE`, as torchrun or `trainer.backends.ray` set them): gloo on CPU, NCCL with CUDA.
    Returns (rank, world size)."""
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size()


def shard_batch(
    samples: Sequence[TrainingSample], advantages: Sequence[float], rank: int, world: int
) -> tuple[list[TrainingSample], list[float]]:
    """This rank's equal share of a global batch (strided); short shares are padded with a
    copy of their first sample at advantage 0, without per-token advantages (no policy
    gradient)."""
    if len(samples) != len(advantages) or not samples:
        raise ValueError("need one advantage per sample, and at least one sample")
    per_rank = math.ceil(len(samples) / world)
    local = list(samples[rank::world])
    adv = [float(a) for a in advantages[rank::world]]
    filler = local[0] if local else samples[0]
    # No gradient from the filler: its per-token advantages (distillation's) go too.
    filler = dataclasses.replace(
        filler, token_advantages=(), teacher_top_ids=(), teacher_top_logprobs=()
    )
    while len(local) < per_rank:
        local.append(filler)
        adv.append(0.0)
    return local, adv


def combine_stats(per_rank: Sequence[LearnerStats], *, tokens: int, sequences: int) -> LearnerStats:
    """One `LearnerStats` for a data-parallel step from every rank's own.

    Losses are the mean over ranks (the gradient is the ranks' mean); per-token averages are
    weighted by each rank's tokens; the gradient norm and learning rate are global, so rank
    0's; staleness max and duration are the largest. `tokens` and `sequences` are the global
    batch's own counts (the zero-advantage fillers of short ranks are not counted).
    """
    if not per_rank:
        raise ValueError("combine_stats needs the stats of at least one rank")
    first = per_rank[0]
    weights = [max(s.tokens, 0) for s in per_rank]
    total = sum(weights) or 1

    def token_mean(field: str) -> float:
        return sum(getattr(s, field) * w for s, w in zip(per_rank, weights, strict=True)) / total

    def rank_mean(field: str) -> float:
        return sum(getattr(s, field) for s in per_rank) / len(per_rank)

    return LearnerStats(
        loss=rank_mean("loss"),
        policy_loss=rank_mean("policy_loss"),
        kl_ref=rank_mean("kl_ref"),
        kl_sampler=token_mean("kl_sampler"),
        entropy=token_mean("entropy"),
        clip_fraction=token_mean("clip_fraction"),
        tis_clip_fraction=token_mean("tis_clip_fraction"),
        ratio_mean=token_mean("ratio_mean"),
        grad_norm=first.grad_norm,
        lr=first.lr,
        tokens=tokens,
        sequences=sequences,
        staleness_mean=token_mean("staleness_mean"),
        staleness_max=max(s.staleness_max for s in per_rank),
        duration_s=max(s.duration_s for s in per_rank),
        observation_loss=rank_mean("observation_loss"),
        logit_kl=rank_mean("logit_kl"),
    )


class _DataParallel(Learner):
    """Shared by both backends: batch sharding and the portable (unsharded) state."""

    rank: int
    world_size: int

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """One optimizer step on the global batch (identical on every rank)."""
        local, adv = shard_batch(samples, advantages, self.rank, self.world_size)
        return super().train_step(local, adv)

    def train_shard(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """One optimizer step on this rank's share, already split by the caller with
        `shard_batch` (every rank must get as many samples as the others)."""
        return super().train_step(samples, advantages)

    # -- backend hooks --------------------------------------------------------------------

    def _module(self) -> torch.nn.Module:
        """The wrapped model itself (parameter names as in the single-process learner)."""
        return self.model

    def _trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Trainable parameters in the optimizer's (and the single-process learner's) order."""
        return [(n, p) for n, p in self._module().named_parameters() if p.requires_grad]

    def _full_weights(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _load_full_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        raise NotImplementedError

    def _optimizer_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_optimizer_state(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError

    # -- state ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Like `Learner.state_dict`, unsharded: the same keys and layout on every rank (a
        collective: call on every rank)."""
        names = {n for n, _ in self._trainable()}
        weights = {k: v for k, v in self._full_weights().items() if k in names}
        return {
            "weights": weights,
            "optimizer": self._optimizer_state(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of `state_dict`; also takes a single-process `Learner`'s (a collective)."""
        names = {n for n, _ in self._trainable()}
        known = set(self._module().state_dict())
        weights = state["weights"]
        missing, unexpected = names - set(weights), set(weights) - known
        if missing or unexpected:
            raise ValueError(
                f"checkpoint does not match the model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        self._load_full_weights(weights)
        self._load_optimizer_state(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])


def _check_supported(lora: LoRAConfig | None) -> None:
    if lora is not None and lora.enabled:
        raise ValueError("LoRA is not supported by the distributed learners")


def _portable_state(
    groups: Sequence[Mapping[str, Any]],
    per_param: Sequence[Mapping[str, torch.Tensor]],
) -> dict[str, Any]:
    """A torch optimizer `state_dict` over parameter indices (the single-process layout)."""
    return {
        "state": {i: dict(s) for i, s in enumerate(per_param) if s},
        "param_groups": [dict(g) for g in groups],
    }


class FSDPLearner(_DataParallel):
    """FSDP2: `fully_shard` on every decoder layer and on the root; AdamW on DTensor shards."""

    def __init__(self, model: Any, settings: LearnerSettings):
        """Shard `model` and train it as `settings` say (as for `Learner`)."""
        from torch.distributed.fsdp import fully_shard

        _check_supported(settings.lora)
        self.rank, self.world_size = init_process_group()
        super().__init__(model, settings)
        optim, total_steps = settings.optim, settings.total_steps
        for layer in _decoder_layers(self.model):
            fully_shard(layer)
        fully_shard(self.model)
        # Sharding replaced the parameters with DTensors: the optimizer must be rebuilt.
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_schedule(optim.schedule, optim.warmup_steps, total_steps)
        )

    @torch.no_grad()
    def engine_weights(self) -> dict[str, torch.Tensor]:
        """Full weights gathered from the shards (a collective: call on every rank)."""
        return self._full_weights()

    @torch.no_grad()
    def _full_weights(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=False)
        return {
            k: v.detach().clone()
            for k, v in get_model_state_dict(self.model, options=options).items()
        }

    @torch.no_grad()
    def _load_full_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        # Every rank holds the full tensors and keeps its own shard of each (no broadcast).
        options = StateDictOptions(full_state_dict=True, strict=False)
        set_model_state_dict(self.model, dict(weights), options=options)

    @torch.no_grad()
    def _optimizer_state(self) -> dict[str, Any]:
        from torch.distributed.tensor import DTensor

        def full(value: Any) -> Any:
            if isinstance(value, DTensor):
                return value.full_tensor()  # a collective, in the same order on every rank
            return value.detach().clone() if torch.is_tensor(value) else value

        params = [p for _, p in self._trainable()]
        per_param = [
            {k: full(v) for k, v in sorted(self.optimizer.state.get(p, {}).items())} for p in params
        ]
        return _portable_state(self.optimizer.state_dict()["param_groups"], per_param)

    @torch.no_grad()
    def _load_optimizer_state(self, state: Mapping[str, Any]) -> None:
        from torch.distributed.tensor import DTensor, distribute_tensor

        params = [p for _, p in self._trainable()]
        sharded: dict[int, dict[str, Any]] = {}
        for index, values in state["state"].items():
            param = params[int(index)]
            sharded[int(index)] = {
                key: (
                    distribute_tensor(
                        value, param.device_mesh, param.placements, src_data_rank=None
                    )
                    if isinstance(param, DTensor)
                    and torch.is_tensor(value)
                    and value.shape == param.shape
                    else value
                )
                for key, value in values.items()
            }
        self.optimizer.load_state_dict({"state": sharded, "param_groups": state["param_groups"]})


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
        settings: LearnerSettings,
        *,
        zero_stage: int = 0,
    ):
        """Train `model` as `settings` say (as for `Learner`) under ZeRO `zero_stage` 0, 1 or 2."""
        import deepspeed

        _check_supported(settings.lora)
        if zero_stage not in (0, 1, 2):
            raise ValueError("DeepSpeedLearner supports ZeRO stages 0, 1 and 2")
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        deepspeed.init_distributed(dist_backend=backend, verbose=False)
        self.rank, self.world_size = init_process_group(backend)
        self.zero_stage = zero_stage
        super().__init__(model, settings)
        optim = settings.optim
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
        self.base_optimizer = self.optimizer
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
        return self._full_weights()

    def _module(self) -> torch.nn.Module:
        return self.engine.module

    @torch.no_grad()
    def _full_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.engine.module.state_dict().items()}

    @torch.no_grad()
    def _load_full_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        self.engine.module.load_state_dict(dict(weights), strict=False)
        if self.zero_stage > 0:
            # ZeRO 1/2 step fp32 master partitions: refresh them from the loaded weights.
            self.optimizer.refresh_fp32_params()

    def _flat_state(self) -> list[dict[str, Any]]:
        """ZeRO 1/2: the base optimizer's state of each flat fp32 partition."""
        return [self.base_optimizer.state.get(f, {}) for f in self._flat_partitions()]

    def _flat_partitions(self) -> list[torch.Tensor]:
        return list(self.optimizer.single_partition_of_fp32_groups)

    @torch.no_grad()
    def _optimizer_state(self) -> dict[str, Any]:
        params = [p for _, p in self._trainable()]
        if self.zero_stage == 0:  # the base optimizer steps the parameters themselves
            full = self.base_optimizer.state_dict()
            per_param = [
                {k: _clone(v) for k, v in full["state"].get(i, {}).items()}
                for i in range(len(params))
            ]
            return _portable_state(full["param_groups"], per_param)
        from deepspeed.utils import safe_get_full_optimizer_state

        flat = self._flat_state()
        groups = [
            {**{k: v for k, v in g.items() if k != "params"}, "params": list(range(len(params)))}
            for g in self.base_optimizer.param_groups[:1]
        ]
        if not any(flat):  # no step yet: AdamW has no state
            return _portable_state(groups, [{} for _ in params])
        keys = sorted(k for k, v in flat[0].items() if torch.is_tensor(v) and v.dim() > 0)
        step = flat[0].get("step")
        per_param = []
        for p in params:  # a collective per tensor, in the same order on every rank
            values: dict[str, Any] = {k: safe_get_full_optimizer_state(p, k) for k in keys}
            if step is not None:
                values["step"] = _clone(step)
            per_param.append(values)
        return _portable_state(groups, per_param)

    @torch.no_grad()
    def _load_optimizer_state(self, state: Mapping[str, Any]) -> None:
        saved = {int(i): s for i, s in state["state"].items()}
        if self.zero_stage == 0:
            self.base_optimizer.load_state_dict(
                {"state": saved, "param_groups": state["param_groups"]}
            )
            return
        from deepspeed.utils import safe_set_full_optimizer_state

        hyper = {k: v for k, v in state["param_groups"][0].items() if k != "params"}
        for group in self.base_optimizer.param_groups:
            group.update(hyper)
        if not saved:
            return
        params = [p for _, p in self._trainable()]
        steps = [float(s["step"]) for s in saved.values() if "step" in s]
        step = torch.tensor(max(steps, default=0.0), dtype=torch.float32)
        for flat in self._flat_partitions():
            flat_state = self.base_optimizer.state[flat]
            if not flat_state:  # what AdamW would create at its first step
                flat_state["exp_avg"] = torch.zeros_like(flat)
                flat_state["exp_avg_sq"] = torch.zeros_like(flat)
            flat_state["step"] = step.clone()
        # Link each parameter's fragment of the flat state, then fill it from the full tensors.
        self.optimizer._lazy_init_hp_params_optimizer_state()
        for index, param in enumerate(params):
            for key, value in saved.get(index, {}).items():
                if torch.is_tensor(value) and value.shape == param.shape:
                    safe_set_full_optimizer_state(param, value, key)


def _clone(value: Any) -> Any:
    return value.detach().clone() if torch.is_tensor(value) else value


def _decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (`model.model.layers`)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []
