"""Registry rows as the SDK's JSON shapes (`Checkpoint`, `TrainingRun`, metadata, times)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker.store import CheckpointKind, CheckpointRow, RunRow


def iso(t: float | None) -> str | None:
    """Unix time as an ISO-8601 UTC datetime."""
    return None if t is None else datetime.fromtimestamp(t, tz=UTC).isoformat()


def str_metadata(meta: dict[str, Any] | None) -> dict[str, str]:
    """Metadata as the SDK's `dict[str, str]` (other values as JSON)."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in (meta or {}).items()}


def checkpoint_json(row: CheckpointRow) -> dict[str, Any]:
    """A checkpoint as the SDK's `Checkpoint`."""
    return {
        "checkpoint_id": f"{row.kind}/{row.name}",
        "checkpoint_type": CheckpointKind(row.kind).api_type,
        "time": iso(row.created),
        "tinker_path": row.tinker_path,
        "size_bytes": row.size_bytes,
        "public": row.public,
        "user_metadata": str_metadata(row.user_metadata),
        "expires_at": iso(row.expires_at),
    }


def run_json(
    run: RunRow,
    *,
    corrupted: bool,
    last: CheckpointRow | None,
    last_sampler: CheckpointRow | None,
) -> dict[str, Any]:
    """A training run as the SDK's `TrainingRun` (`corrupted`: a restart lost its state)."""
    lora = lora_records.read(run.lora)
    return {
        "training_run_id": run.model_id,
        "base_model": run.base_model,
        "model_owner": "local",
        "is_lora": lora is not None,
        "corrupted": corrupted,
        "lora_rank": None if lora is None else lora.r,
        "last_request_time": iso(run.last_request),
        "last_checkpoint": None if last is None else checkpoint_json(last),
        "last_sampler_checkpoint": None if last_sampler is None else checkpoint_json(last_sampler),
        "user_metadata": str_metadata(run.user_metadata),
    }
