"""LoRA settings on the Tinker side: the trainer's `LoRAConfig` is the one type.

The SDK's `lora_config` (`rank`, `train_attn`, `train_mlp`, `train_unembed`, `seed`) becomes a
`LoRAConfig` when a model is created; runs and checkpoints store `LoRAConfig`'s own fields. The
reader also accepts records saved by older servers, which stored the SDK's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from skyrl_sdk.trainer.config import LoRAConfig

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
"""Attention projections (`train_attn`)."""
MLP = ("gate_proj", "up_proj", "down_proj")
"""MLP projections (`train_mlp`)."""
UNEMBED = ("lm_head",)
"""The output projection (`train_unembed`)."""
_SDK_KEYS = {"rank", "train_attn", "train_mlp", "train_unembed", "seed"}


def from_request(cfg: Mapping[str, Any]) -> LoRAConfig:
    """The settings for an SDK `lora_config` (alpha = rank, so the scale is 1; no dropout);
    ValueError naming what is wrong (unknown keys are ignored: newer SDKs add fields)."""
    rank = cfg.get("rank", 32)
    modules: tuple[str, ...] = ()
    if cfg.get("train_attn", True):
        modules += ATTN
    if cfg.get("train_mlp", True):
        modules += MLP
    if cfg.get("train_unembed", True):
        modules += UNEMBED
    if not modules:
        raise ValueError("lora_config trains nothing: enable attn, mlp or unembed")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"lora_config.rank must be a positive integer, got {rank!r}")
    try:
        return LoRAConfig(
            enabled=True, r=rank, alpha=float(rank), target_modules=modules, seed=cfg.get("seed")
        )
    except ValidationError as e:
        raise ValueError(f"bad lora_config: {e.errors()[0]['msg']}") from None


def to_record(lora: LoRAConfig | None) -> dict[str, Any] | None:
    """What runs and checkpoints store (`LoRAConfig`'s fields as JSON)."""
    return None if lora is None else lora.model_dump(mode="json")


def read(record: Mapping[str, Any] | None) -> LoRAConfig | None:
    """Stored settings back: this server's records, or the SDK-keyed ones older servers wrote
    (`{"rank", "train_attn", "train_mlp", "train_unembed", "seed"}`)."""
    if record is None:
        return None
    if "rank" in record and set(record) <= _SDK_KEYS:
        return from_request(record)
    return LoRAConfig.model_validate(dict(record))


def sdk_fields(lora: LoRAConfig) -> dict[str, Any]:
    """The settings in the SDK's terms (`lora_rank`, `train_*`), for get_info and weights_info."""
    modules = set(lora.target_modules)
    return {
        "lora_rank": lora.r,
        "train_attn": modules.issuperset(ATTN),
        "train_mlp": modules.issuperset(MLP),
        "train_unembed": modules.issuperset(UNEMBED),
    }
