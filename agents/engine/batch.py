"""`RunningBatch`: the rows the engine is decoding, and where their keys and values live.

One slot per row (None: free, until the next request takes it); their keys and values are
right-aligned in a `KVSlots`, beside the padding mask, each row's next position and next
input token. Rows of different lengths are right-aligned, padding masked on their left; each
row has its own position ids, so padding never changes what a row computes. A request joins
by taking a free slot and leaves by freeing it: no other row is copied either way (see
`kv_slots`). Only the engine's worker thread changes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from skyrl_sdk.agents.engine.kv_slots import MIN_SPARE, KVSlots
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.policy import FinishReason

if TYPE_CHECKING:
    import torch

    from skyrl_sdk.agents.engine.prefix_cache import KV
    from skyrl_sdk.agents.engine.stats import Counters


class RunningBatch:
    """The running batch's rows, keys and values, mask, positions and next tokens."""

    def __init__(self, device: torch.device, counters: Counters):
        self.device = device
        """Where its tensors live."""
        self._counters = counters
        self.rows: list[Request | None] = []
        """One entry per slot (None: free)."""
        self.slots: KVSlots | None = None
        """Keys and values, right-aligned (None: no batch)."""
        self.mask: torch.Tensor | None = None
        """`[slots, width]` padding mask (1: a column the row attends to)."""
        self.pos: torch.Tensor | None = None
        """Each slot's next position (its length)."""
        self.next: torch.Tensor | None = None
        """Each slot's next input token."""

    @property
    def running(self) -> int:
        """Requests in the batch now (finished rows of a static batch included)."""
        return sum(r is not None for r in self.rows)

    def tenants(self) -> Counter[str | None]:
        """Rows per tenant (every occupied slot)."""
        return Counter(row.tenant for row in self.rows if row is not None)

    def live(self) -> list[int]:
        """Slots of rows still running (not done)."""
        return [i for i, r in enumerate(self.rows) if r is not None and not r.done]

    def reset(self) -> None:
        """Drop the running batch (every row has left)."""
        if self.slots is not None:
            self._counters.copies += self.slots.copies
        self.rows, self.slots, self.mask, self.pos, self.next = [], None, None, None, None

    def join(self, joining: Sequence[tuple[Request, KV, int]]) -> None:
        """Add prefilled requests (each with its keys and values and first sampled token):
        each takes a free slot (or a new one), right-aligned, with padding on its left masked
        out. The other rows stay where they are: nothing is copied unless the buffers run out
        of room (see `kv_slots`)."""
        import torch

        lengths = [len(r.prompt) for r, _, _ in joining]
        if self.slots is None:
            width = max(lengths)
            self.slots = KVSlots([kv for _, kv, _ in joining], width)
            self.rows = [r for r, _, _ in joining]
            self.mask = torch.zeros((len(joining), width), dtype=torch.long, device=self.device)
            for slot, n in enumerate(lengths):
                self.mask[slot, width - n :] = 1
            self.pos = torch.tensor(lengths, dtype=torch.long, device=self.device)
            self.next = torch.tensor([t for _, _, t in joining], device=self.device)
            return
        free = self.free_slots(len(joining))
        self.widen(max(lengths))
        assert self.mask is not None and self.pos is not None and self.next is not None
        width = self.slots.width
        for (r, kv, first), n, slot in zip(joining, lengths, free, strict=False):
            self.slots.write(slot, kv)
            self.mask[slot] = 0
            self.mask[slot, width - n :] = 1
            self.pos[slot] = n
            self.next[slot] = first
            self.rows[slot] = r

    def free_slots(self, count: int) -> list[int]:
        """`count` free slots, adding slots if there are too few."""
        import torch

        assert self.slots is not None and self.mask is not None
        assert self.pos is not None and self.next is not None
        free = [i for i, r in enumerate(self.rows) if r is None][:count]
        extra = count - len(free)
        if extra > 0:
            free += range(len(self.rows), len(self.rows) + extra)
            self.slots.add_slots(extra)
            self.rows += [None] * extra
            self.mask = torch.cat([self.mask, self.mask.new_zeros((extra, self.slots.width))])
            self.pos = torch.cat([self.pos, self.pos.new_zeros(extra)])
            self.next = torch.cat([self.next, self.next.new_zeros(extra)])
        return free

    def widen(self, width: int) -> None:
        """At least `width` columns in use (new ones are padding, on the left)."""
        import torch

        assert self.slots is not None and self.mask is not None
        if width > self.slots.width:
            pad = self.mask.new_zeros((len(self.rows), width - self.slots.width))
            self.mask = torch.cat([pad, self.mask], 1)
            self.slots.widen(width)

    def own_columns(self, row: int) -> KV:
        """A copy of one row's own keys and values, skipping the holes of steps it sat out."""
        assert self.slots is not None and self.mask is not None
        cols = self.mask[row].nonzero().view(-1)
        return [(k[row : row + 1, :, cols], v[row : row + 1, :, cols]) for k, v in self.slots.kv()]

    def squeeze(self) -> None:
        """Close the gaps of rows that sat steps out once the batch's columns number more than
        twice its longest row's (plus `MIN_SPARE`): each such row's own columns are copied,
        right-aligned, within its slot, and the width trimmed to the longest row. So sitting
        out never grows the keys and values kept, nor a step's attention, past that bound
        (amortized: one copy of a row per doubling)."""
        if self.slots is None or self.mask is None or self.pos is None:
            return
        longest = int(self.pos.max())
        if self.slots.width <= 2 * longest + MIN_SPARE:
            return
        for i, r in enumerate(self.rows):
            n = int(self.pos[i])
            if r is None or r.done or int(self.mask[i, -n:].sum()) == n:
                continue  # free, leaving, or already contiguous at the right
            self.slots.write(i, self.own_columns(i))
            self.mask[i] = 0
            self.mask[i, -n:] = 1
        self.mask = self.mask[:, -longest:]
        self.slots.trim(longest)

    def leave(self, frees_rows: bool) -> None:
        """Free the slots of finished and cancelled rows (`frees_rows` False, a static batch:
        only once all are), then drop the padding columns no row needs any more. A batch that
        has become mostly free slots is compacted (the one copy here)."""
        for r in self.rows:
            if r is not None and r.cancelled and r.finish is None:
                r.finish = FinishReason.ABORT
                self._counters.cancelled += 1
        live = [i for i, r in enumerate(self.rows) if r is not None and r.finish is None]
        if len(live) == self.running:
            return
        if not live:
            self.reset()
            return
        if frees_rows:
            self._free_finished(live)

    def _free_finished(self, live: list[int]) -> None:
        import torch

        assert self.slots is not None and self.mask is not None
        assert self.pos is not None and self.next is not None
        for i, r in enumerate(self.rows):
            if r is not None and r.finish is not None:
                self.rows[i] = None
                self.mask[i] = 0  # a free slot attends only to its own new columns
                self.pos[i] = 0
        if len(live) <= len(self.rows) // 2:
            index = torch.tensor(live, device=self.device)
            self.slots.select(live)
            self.rows = [self.rows[i] for i in live]
            self.mask = self.mask.index_select(0, index)
            self.pos = self.pos.index_select(0, index)
            self.next = self.next.index_select(0, index)
        # Rows are right-aligned: the earliest-starting live row sets the width (a row that
        # sat steps out spans more columns than its length; argmax finds its first column).
        rows = torch.tensor(
            [i for i, r in enumerate(self.rows) if r is not None], device=self.device
        )
        width = self.mask.shape[1] - int(self.mask[rows].argmax(1).min())
        if width < self.slots.width:
            self.mask = self.mask[:, -width:]
            self.slots.trim(width)
