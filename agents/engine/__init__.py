"""The local inference engine, in vLLM v1's parts (issue 26): one module per concept.

- `frontend`: `LocalEngine`, the public face: `generate`, `generate_stream`, `update_weights`,
  `stats`; it builds the parts below and starts the worker thread.
- `core`: `EngineCore`, the worker's loop: load queued weights, admit, plan a step, run it.
- `scheduler`: who joins the running batch and what the next step computes, as a frozen
  `StepPlan`; `ContinuousScheduler` (mixed steps, the fair share of a step) and
  `StaticScheduler` (the baseline), chosen by `Scheduling`.
- `fairness`: the scheduler's policy across sessions (per-tenant queues and shares).
- `runner`: `ModelRunner` executes a plan: prefill, decoding step (all rows or the fair
  share's), mixed step; it samples every row and keeps finished sequences' keys and values.
- `batch`: `RunningBatch`, the running rows and their right-aligned slots (`kv_slots`, the KV
  manager); `prefix_cache`: keys and values of earlier prompts and sequences.
- `packed_step`: the mixed step's attention; `split_linear`: small-batch products over every
  CPU core; `sampler`: temperature, top-k, top-p (the one sampler of the SDK).
- `request`, `stats`, `weights`: a generate call, the counters, weight sync; `options`: a
  request's engine-level options (logprob mode, prompt logprobs, stop suffixes).
- `sync`: `SyncEngine`, the same parts stepped by the caller's own thread (the Tinker server's
  sampler, `trainer.tinker.backend.Sampler`).

Importing this package does not import torch or transformers (they load with the first
engine).
"""

from __future__ import annotations

from skyrl_sdk.agents.engine.fairness import FairnessLimits, TenantQueueFull
from skyrl_sdk.agents.engine.frontend import LocalEngine
from skyrl_sdk.agents.engine.scheduler import Scheduling
from skyrl_sdk.agents.engine.stats import EngineStats

__all__ = ["EngineStats", "FairnessLimits", "LocalEngine", "Scheduling", "TenantQueueFull"]
