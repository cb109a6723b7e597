"""`TokenView`: the exact ids of an episode so far, as the agent loop hands them to a policy.

An episode's ids are the current segment's prompt ids (a tuple rendered once) followed by the
ids appended turn by turn (sampled ids, then the chat template's delta for the observation).
`rollout` keeps the latter in one append-only list per segment, so a view of "the first `n`
ids" never changes once made, and handing the policy one costs no copy of the conversation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import overload


class TokenView(Sequence[int]):
    """The exact ids so far, as `rollout` hands them to `Policy.generate`, without copying
    the conversation: a read-only view of the segment's prompt ids (a tuple) followed by
    the first ids of the episode's append-only list of later ids. That list only ever
    grows (a compacted context starts a new one), so the view never changes. Iterate it,
    or call `list(view)` for a list."""

    __slots__ = ("_n", "_prefix", "_tail")

    def __init__(self, prefix: tuple[int, ...], tail: list[int], n: int):
        self._prefix = prefix
        self._tail = tail
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[int]:
        return itertools.chain(
            self._prefix, itertools.islice(self._tail, self._n - len(self._prefix))
        )

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...
    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = self._n
        if not -n <= index < n:
            raise IndexError("token index out of range")
        if index < 0:
            index += n
        k = len(self._prefix)
        return self._prefix[index] if index < k else self._tail[index - k]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TokenView | tuple | list):
            return len(other) == self._n and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"TokenView({list(self)!r})"
