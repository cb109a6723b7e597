"""Sequence packing: several `TrainingSample`s concatenated into one row of a token budget.

A packed row is one long sample whose position ids restart at 0 at each member, which is the
form transformers reads as packed sequences (`masking_utils.find_packed_sequence_indices`): with
no 2D attention mask and no KV cache, the causal mask it builds is block-diagonal, so no token
attends to another member (flash-attention kernels take the same position ids as varlen
boundaries). Rows carry every per-token field, so a token's loss in a packed row is the one it
has in a padded batch:

- the first entry of each member is zeroed in the loss and observation masks: in a row it is the
  target of the previous member's last position, a prediction across a boundary; in a padded
  batch the shift drops it anyway;
- each member's advantage is folded into the row's per-token advantages (the row's own
  advantage is 0), so one row can hold samples with different advantages.

`first_fit_decreasing` decides which samples share a row; it sees only lengths, so the rows of
a batch are a function of the batch (no randomness), and every sample is in exactly one row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from skyrl_sdk.agents.trajectory import TrainingSample


@dataclass(frozen=True)
class PackedRow:
    """Samples of one batch concatenated into one row."""

    members: tuple[int, ...]
    """Indices (into the packed batch) of the samples in the row, in row order."""
    sample: TrainingSample
    """The concatenation, with each member's first mask entries zeroed and its advantage in
    `token_advantages` (see the module docstring)."""
    position_ids: tuple[int, ...]
    """Each token's position in its own member: `0..len-1`, restarting at every member."""


def first_fit_decreasing(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Bins of indices into `lengths` whose lengths sum to at most `budget` each: longest
    first (ties by index), each into the first bin it fits, else a new one; a length above
    `budget` gets a bin of its own. Every index is in exactly one bin; bins are in the order
    they were opened, their members in the order they were placed."""
    if budget < 1:
        raise ValueError(f"the packing budget must be at least one token, not {budget}")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(budget - n)
    return bins


def pack_row(
    samples: Sequence[TrainingSample], advantages: Sequence[float], members: Sequence[int]
) -> PackedRow:
    """`samples[members]` concatenated into one row, each with its advantage
    `advantages[i]` (one per sample, as `Learner.train_step` takes them)."""
    ids: list[int] = []
    loss: list[int] = []
    logprobs: list[float] = []
    versions: list[int] = []
    observed: list[int] = []
    per_token: list[float] = []
    top_ids: list[tuple[int, ...]] = []
    top_logprobs: list[tuple[float, ...]] = []
    positions: list[int] = []
    for i in members:
        s, n = samples[i], len(samples[i].input_ids)
        ids.extend(s.input_ids)
        # Entry 0 is the target of the previous member's last token: never trained.
        loss.extend((0, *s.loss_mask[1:]))
        logprobs.extend((0.0, *s.logprobs[1:]))
        versions.extend((-1, *s.policy_versions[1:]))
        observed.extend((0, *s.observation_mask[1:]) if s.observation_mask else (0,) * n)
        extra = s.token_advantages or (0.0,) * n
        per_token.extend(advantages[i] + a for a in extra)
        top_ids.extend(((), *s.teacher_top_ids[1:]) if s.teacher_top_ids else ((),) * n)
        top_logprobs.extend(
            ((), *s.teacher_top_logprobs[1:]) if s.teacher_top_logprobs else ((),) * n
        )
        positions.extend(range(n))
    distilled = any(samples[i].teacher_top_ids for i in members)
    sample = TrainingSample(
        tuple(ids),
        tuple(loss),
        tuple(logprobs),
        tuple(versions),
        tuple(observed) if any(samples[i].observation_mask for i in members) else (),
        tuple(per_token),
        tuple(top_ids) if distilled else (),
        tuple(top_logprobs) if distilled else (),
    )
    return PackedRow(tuple(members), sample, tuple(positions))


def pack(
    samples: Sequence[TrainingSample], advantages: Sequence[float], budget: int
) -> list[PackedRow]:
    """The rows `first_fit_decreasing` makes of `samples` within `budget` tokens each."""
    bins = first_fit_decreasing([len(s.input_ids) for s in samples], budget)
    return [pack_row(samples, advantages, b) for b in bins]


def join_targets(per_member: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-member target-aligned values (length `len - 1` each, as a padded batch's rows
    hold them) laid out as a packed row's targets: a 0 filler at each boundary, where the
    row's target is the next member's first token (masked out of every loss)."""
    parts: list[torch.Tensor] = []
    for k, values in enumerate(per_member):
        if k:
            parts.append(values.new_zeros(1))
        parts.append(values)
    return torch.cat(parts)
