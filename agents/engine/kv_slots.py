"""`KVSlots`: the keys and values of the engine's running batch, one slot per row.

Each layer keeps one buffer per keys and values, `[slots, kv_heads, capacity, head_dim]`. The
columns in use are `[lo, hi)`, the same for every slot: rows are right-aligned at `hi` (a row
of n tokens fills `[hi - n, hi)`; the columns before it are padding the engine masks out). A
decoding step writes each row's new column at `hi` in place, so the past is never copied.

Rows come and go without moving the others: a finished row's slot is handed to the next
request (`write`), the width grows to the left into spare columns kept there (`widen`) and
shrinks by moving `lo` (`trim`). Buffers are copied only when they run out of room (spare
columns on either side, or slots), or when the engine compacts a batch that has become mostly
empty (`select`). Buffers start zeroed, and every column outside a row has held finite values
of some row, so masked columns never carry NaN into attention (0 x NaN is NaN).

transformers is imported lazily (the layer class is built on first use).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from skyrl_sdk.agents.engine.prefix_cache import KV

MIN_SPARE = 64
"""Spare columns added on a side that ran out of room (at least; half the width if more)."""


class KVSlots:
    """Keys and values of a batch of right-aligned rows (see the module docstring)."""

    def __init__(self, rows: Sequence[KV], width: int):
        """Slots holding `rows` (each a per-layer list of `[1, kv_heads, n, head_dim]`
        keys and values, n <= `width`), right-aligned in `width` columns."""
        k0 = rows[0][0][0]
        self._num_layers = len(rows[0])
        spare = max(MIN_SPARE, width // 2)
        self._buffers = self._alloc(k0, len(rows), spare, width + spare)
        self.lo, self.hi = spare, spare + width
        """Columns in use, `[lo, hi)` of every buffer."""
        self.copies = 0
        """Times the rows in use were copied into new buffers (out of room, or `select`)."""
        for slot, kv in enumerate(rows):
            self.write(slot, kv)

    def _alloc(
        self, like: torch.Tensor, slots: int, left: int, right: int
    ) -> list[list[torch.Tensor]]:
        """Zeroed `[keys, values]` buffers per layer: `slots` rows, `left + right` columns."""
        import torch

        shape = (slots, like.shape[1], left + right, like.shape[3])
        return [
            [torch.zeros(shape, dtype=like.dtype, device=like.device) for _ in range(2)]
            for _ in range(self._num_layers)
        ]

    @property
    def slots(self) -> int:
        return self._buffers[0][0].shape[0]

    @property
    def width(self) -> int:
        return self.hi - self.lo

    @property
    def capacity(self) -> int:
        return self._buffers[0][0].shape[2]

    @property
    def num_layers(self) -> int:
        return self._num_layers

    def buffers(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's whole key and value buffers (every slot, every column)."""
        k_buf, v_buf = self._buffers[layer]
        return k_buf, v_buf

    def kv(self) -> KV:
        """Every layer's keys and values in use (views, `[slots, kv_heads, width, head_dim]`)."""
        return [(k[:, :, self.lo : self.hi], v[:, :, self.lo : self.hi]) for k, v in self._buffers]

    def row(self, slot: int, n: int) -> KV:
        """A copy of the last `n` columns of one slot (a sequence to keep after it leaves)."""
        return [
            (k[slot : slot + 1, :, self.hi - n : self.hi].clone(),
             v[slot : slot + 1, :, self.hi - n : self.hi].clone())
            for k, v in self._buffers
        ]  # fmt: skip

    def write(self, slot: int, kv: KV, end: int | None = None) -> None:
        """Put one row's keys and values (n columns) into `slot`, ending at column `end`
        (default `hi`: right-aligned; they must stay within `[lo, capacity)`)."""
        end = self.hi if end is None else end
        n = kv[0][0].shape[2]
        assert self.lo <= end - n and end <= self.capacity
        for (k_buf, v_buf), (k, v) in zip(self._buffers, kv, strict=True):
            k_buf[slot, :, end - n : end] = k[0]
            v_buf[slot, :, end - n : end] = v[0]

    def widen(self, width: int) -> None:
        """Grow the columns in use to `width` by moving `lo` left (copying into new buffers
        only if the spare columns there run out). The new columns are padding."""
        extra = width - self.width
        if extra <= 0:
            return
        if extra > self.lo:
            left = extra + max(MIN_SPARE, width // 2)
            self._move(range(self.slots), left=left, right=self.capacity - self.hi)
        self.lo -= extra

    def trim(self, width: int) -> None:
        """Shrink the columns in use to the last `width` (no copy)."""
        self.lo = max(self.lo, self.hi - width)

    def add_slots(self, count: int) -> None:
        """`count` more slots (zero, until written)."""
        self._move(
            [*range(self.slots), *([-1] * count)], left=self.lo, right=self.capacity - self.hi
        )

    def select(self, slots: Sequence[int]) -> None:
        """Keep only `slots`, in that order (a copy into smaller buffers)."""
        self._move(slots, left=self.lo, right=self.capacity - self.hi)

    def reserve(self, columns: int) -> None:
        """Room for `columns` more columns at `hi` (copying into wider buffers if needed)."""
        if self.hi + columns > self.capacity:
            right = columns + max(MIN_SPARE, self.width // 2)
            self._move(range(self.slots), left=self.lo, right=right)

    def advance(self, columns: int) -> None:
        """Count `columns` written at `hi` by a forward pass (see `layers`)."""
        self.hi += columns

    def layers(self) -> list[Any]:
        """transformers cache layers over these buffers for one forward pass: each layer's
        `update` writes the new columns at `hi` and returns the columns in use through them.
        Call `reserve` before and `advance` after."""
        cls = _slot_layer_class()
        return [cls(self, i, k, v) for i, (k, v) in enumerate(self.kv())]

    def _move(self, slots: Sequence[int], *, left: int, right: int) -> None:
        """New buffers with `left` spare columns before the columns in use and `right` columns
        from `hi` on; slot i of the new buffers is old slot `slots[i]` (-1: a zero row)."""
        import torch

        width = self.width
        k0 = self._buffers[0][0]
        fresh = self._alloc(k0, len(slots), left, right + width)
        index = [i for i, s in enumerate(slots) if s >= 0]
        take = torch.tensor([s for s in slots if s >= 0], dtype=torch.long, device=k0.device)
        for new, old in zip(fresh, self._buffers, strict=True):
            for n_buf, o_buf in zip(new, old, strict=True):
                rows = o_buf[:, :, self.lo : self.hi].index_select(0, take)
                if len(index) == len(slots):
                    n_buf[:, :, left : left + width] = rows
                else:
                    n_buf[index, :, left : left + width] = rows
        self._buffers = fresh
        self.lo, self.hi = left, left + width
        self.copies += 1


_SlotLayer: Any = None


def _slot_layer_class() -> type:
    global _SlotLayer
    if _SlotLayer is not None:
        return _SlotLayer
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """One layer of a `KVSlots` as a transformers cache layer."""

        def __init__(self, slots: KVSlots, index: int, keys: Any, values: Any):
            # What `lazy_initialization` sets, without its two throwaway tensors: a decoding
            # step builds one of these per layer.
            super().__init__()
            self._slots, self._index = slots, index
            self.device, self.keys, self.values = keys.device, keys, values
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            s = self._slots
            k_buf, v_buf = s._buffers[self._index]
            t = key_states.shape[-2]
            k_buf[:, :, s.hi : s.hi + t] = key_states
            v_buf[:, :, s.hi : s.hi + t] = value_states
            self.keys, self.values = k_buf[:, :, s.lo : s.hi + t], v_buf[:, :, s.lo : s.hi + t]
            return self.keys, self.values

    _SlotLayer = SlotLayer
    return SlotLayer


def subset_layers(slots: KVSlots, index: torch.Tensor) -> list[Any]:
    """transformers cache layers for a decoding step of the slots `index` only (the fair
    share of a step, see `runner`): each writes the new column of those slots at `hi` and
    hands attention their columns in use (a gathered copy, `len(index)` rows)."""
    cls = _subset_layer_class()
    return [cls(slots, i, index) for i in range(slots.num_layers)]


@functools.cache
def _subset_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class SubsetLayer(DynamicLayer):
        """One layer of a `KVSlots` for a step of some of its slots."""

        def __init__(self, slots: KVSlots, layer: int, index: torch.Tensor):
            super().__init__()
            self._slots, self._index = slots, index
            self._k, self._v = slots.buffers(layer)
            # Only the shape is read before `update` (the past's length): a view, no gather.
            self.device = self._k.device
            self.keys = self._k[: index.numel(), :, slots.lo : slots.hi]
            self.values = self._v[: index.numel(), :, slots.lo : slots.hi]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            s, index = self._slots, self._index
            hi, t = s.hi, key_states.shape[-2]
            self._k[index, :, hi : hi + t] = key_states
            self._v[index, :, hi : hi + t] = value_states
            self.keys = self._k[index, :, s.lo : hi + t]
            self.values = self._v[index, :, s.lo : hi + t]
            return self.keys, self.values

    return SubsetLayer
