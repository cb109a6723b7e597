"""The engine's counters: `Counters` (kept by the worker thread) and `EngineStats`, the frozen
snapshot `LocalEngine.stats()` returns."""

from __future__ import annotations

from dataclasses import dataclass

from skyrl_sdk.agents.engine.prefix_cache import PrefixCacheStats


@dataclass(frozen=True)
class EngineStats:
    """Counters of a `LocalEngine` since it started."""

    steps: int
    """Decoding steps (one forward pass of the running batch each)."""
    prefills: int
    """Prefill forward passes (one per admitted request whose prompt was not wholly cached)."""
    prompt_tokens: int
    """Prompt tokens of all admitted requests."""
    prompt_tokens_computed: int
    """Prompt tokens run through the model (the rest came from the prefix cache)."""
    prompt_tokens_reused: int
    """Prompt tokens whose keys and values came from the prefix cache."""
    generated_tokens: int
    """Tokens sampled."""
    cancelled: int
    """Requests that left because their caller cancelled them."""
    mixed_steps: int
    """Decoding steps that also prefilled a request joining the batch (`packed_step`)."""
    rows_sat_out: int
    """Row-steps sat out for the fair share of a step (`fairness.rows_to_step`): one per row
    per step it did not advance in."""
    batch_copies: int
    """Times the running batch's keys and values were copied into new buffers (out of room,
    or a mostly empty batch compacted); a request joining or leaving copies no other row."""
    prefix_cache: PrefixCacheStats
    """The prefix cache's own counters."""


@dataclass
class Counters:
    """What the worker counts as it goes (read from any thread: ints, no lock needed)."""

    steps: int = 0
    """Decoding steps run."""
    prefills: int = 0
    """Prefill passes."""
    prompt: int = 0
    """Prompt tokens admitted."""
    computed: int = 0
    """Prompt tokens run through the model."""
    reused: int = 0
    """Prompt tokens from the prefix cache."""
    generated: int = 0
    """Tokens sampled."""
    cancelled: int = 0
    """Requests cancelled by their caller."""
    copies: int = 0
    """Batch copies of running batches already dropped (the live one counts its own)."""
    mixed: int = 0
    """Mixed steps."""
    sat_out: int = 0
    """Row-steps sat out."""

    def snapshot(self, live_copies: int, prefix_cache: PrefixCacheStats) -> EngineStats:
        """The frozen view, with the live batch's copies and the prefix cache's counters."""
        return EngineStats(
            steps=self.steps,
            prefills=self.prefills,
            prompt_tokens=self.prompt,
            prompt_tokens_computed=self.computed,
            prompt_tokens_reused=self.reused,
            generated_tokens=self.generated,
            cancelled=self.cancelled,
            mixed_steps=self.mixed,
            rows_sat_out=self.sat_out,
            batch_copies=self.copies + live_copies,
            prefix_cache=prefix_cache,
        )
