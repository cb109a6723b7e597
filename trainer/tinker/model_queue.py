"""`ModelQueue`: a model's training requests run in `seq_id` order, whatever order they arrive in.

The SDK numbers a training client's requests 1, 2, 3, ... and sends them pipelined; the chunks
of one forward_backward go in parallel with the first one last.
"""

from __future__ import annotations

from collections.abc import Callable

from skyrl_sdk.trainer.tinker.errors import ServiceError, Status


class ModelQueue:
    """Starts each request once every lower seq_id has started."""

    def __init__(self, next_seq: int = 1):
        self.next_seq = next_seq
        """The seq_id that starts next."""
        self.high_water = next_seq
        """One past the highest seq_id accepted (where a restored queue resumes)."""
        self.pending: dict[int, Callable[[], None]] = {}
        """Accepted requests waiting for a lower seq_id."""

    def check(self, seq_id: int | None) -> None:
        """ServiceError (400) if `seq_id` was already accepted."""
        if seq_id is not None and (seq_id < self.next_seq or seq_id in self.pending):
            raise ServiceError(
                Status.BAD_REQUEST, f"seq_id {seq_id} was already submitted for this model"
            )

    def submit(self, seq_id: int | None, start: Callable[[], None]) -> None:
        """Start `start` now (no seq_id) or once its turn comes."""
        if seq_id is None:
            start()
            return
        self.check(seq_id)
        self.pending[seq_id] = start
        self.high_water = max(self.high_water, seq_id + 1)
        while self.next_seq in self.pending:
            self.pending.pop(self.next_seq)()
            self.next_seq += 1
