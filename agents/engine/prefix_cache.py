"""The engine's prefix cache: keys and values of token sequences seen before.

A multi-turn episode's prompt only ever grows by appending (see `agents.chat`), so turn k+1
starts with turn k's prompt and sampled ids; a GRPO group sends the same prompt several times.
The engine stores the keys and values it computed for such sequences here and, for a new
prompt, takes those of the longest stored prefix instead of recomputing them.

- An entry holds one sequence's tokens and, per layer, `(keys, values)` of shape
  `[1, kv_heads, len(tokens), head_dim]`, computed under one weights version.
- `lookup` finds the entry sharing the longest common prefix with a prompt (any prefix of an
  entry can be reused: its first `n` columns are the keys and values of its first `n` tokens).
- Memory is bounded: entries are evicted least-recently-used once their bytes exceed
  `budget_bytes`; an entry that is a prefix of a newer one is dropped when the newer arrives
  (the newer one serves every lookup the older one could).
- Entries are versioned: each carries the weights version its keys and values were computed
  with (the cache's `version` when inserted), and a lookup only matches entries of the
  version it asks for (the cache's own by default). When the engine loads new weights it calls
  `new_version` (the one place that happens, `weights.WeightSync.apply`), which moves the
  cache to that version and drops the older entries, so keys and values computed with old
  weights are never reused for new requests. Skipping that call is exactly SkyRL #2246's
  bug (stale keys and values after a sync); the trainer's sync check (`trainer.sync_check`)
  is built to catch it.

Entries are never modified in place (the engine concatenates into new tensors), so one entry
can back several requests at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

KV = list[tuple["torch.Tensor", "torch.Tensor"]]
"""Keys and values per layer, each `[batch, kv_heads, seq, head_dim]`."""

DEFAULT_PREFIX_CACHE_BYTES = 1 << 30
"""Default budget of `LocalEngine`'s prefix cache: 1 GiB (SmolLM2-135M in float32 needs
about 46 KB per token, so about 23k tokens: the last turns of a few dozen episodes)."""


def kv_bytes(kv: KV) -> int:
    """Bytes held by the tensors of `kv`."""
    return sum(k.nelement() * k.element_size() + v.nelement() * v.element_size() for k, v in kv)


@dataclass
class PrefixEntry:
    """One cached sequence."""

    tokens: torch.Tensor
    """The sequence's token ids (1-D, long, on CPU)."""
    kv: KV
    """Keys and values of every token, batch size 1."""
    next_logits: torch.Tensor | None
    """Logits for the token after `tokens` (set when the entry is a whole prompt: an identical
    prompt then needs no forward pass at all), else None."""
    nbytes: int
    """Bytes of `kv` and `next_logits` (what counts against the budget)."""
    version: int = 0
    """Weights version `kv` was computed with; lookups at another version skip the entry."""


@dataclass(frozen=True)
class PrefixMatch:
    """The result of a lookup."""

    entry: PrefixEntry
    """The entry sharing the longest prefix with the prompt."""
    length: int
    """How many leading tokens of the prompt it covers (at least 1)."""


@dataclass(frozen=True, eq=False)
class CachedPrefix:
    """What the cache offers a new prompt (`PrefixCache.reusable`)."""

    length: int
    """Leading prompt tokens whose keys and values are reused (0: none)."""
    kv: KV | None
    """Their keys and values (None when `length` is 0)."""
    next_logits: torch.Tensor | None
    """The next-token logits when the whole prompt is cached with them (no forward pass is
    needed at all: a GRPO group's repeated prompt), else None."""


NOTHING_CACHED = CachedPrefix(0, None, None)
"""`reusable`'s answer when the cache has nothing for a prompt (or is off)."""


@dataclass(frozen=True)
class PrefixCacheStats:
    """Counters of a `PrefixCache`."""

    entries: int
    """Entries held now."""
    bytes: int
    """Bytes held now (at most the budget)."""
    budget_bytes: int
    """The budget."""
    hits: int
    """Lookups that found a prefix."""
    misses: int
    """Lookups that found nothing."""
    evictions: int
    """Entries evicted to stay within the budget."""


class PrefixCache:
    """Keys and values of token sequences, least-recently-used eviction under a byte budget.

    Not thread-safe: the engine's worker thread is its only user.
    """

    def __init__(self, budget_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, version: int = 0):
        if budget_bytes < 0:
            raise ValueError(f"prefix cache budget must be >= 0 bytes, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        """Most bytes the entries may hold together; 0 disables the cache."""
        self.version = version
        """Weights version of new entries and of lookups that name none (`new_version`)."""
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()  # oldest first
        self._next_key = 0
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._bytes

    def stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(
            entries=len(self._entries),
            bytes=self._bytes,
            budget_bytes=self.budget_bytes,
            hits=self._hits,
            misses=self._misses,
            evictions=self._evictions,
        )

    def lookup(self, prompt: torch.Tensor, version: int | None = None) -> PrefixMatch | None:
        """The entry of weights `version` (None: the cache's) sharing the longest common
        prefix with `prompt` (1-D long tensor), marked most recently used; None when no such
        entry shares even the first token."""
        if not self._entries or prompt.numel() == 0:
            if self.enabled:
                self._misses += 1
            return None
        version = self.version if version is None else version
        best_key, best_len = -1, 0
        first = int(prompt[0])
        for key, entry in self._entries.items():
            if entry.version != version or int(entry.tokens[0]) != first:
                continue
            n = _common_prefix(entry.tokens, prompt)
            if n > best_len or (n == best_len and n > 0):  # ties: the most recent entry
                best_key, best_len = key, n
        if best_len == 0:
            self._misses += 1
            return None
        self._hits += 1
        self._entries.move_to_end(best_key)
        return PrefixMatch(self._entries[best_key], best_len)

    def reusable(self, prompt: Sequence[int]) -> CachedPrefix:
        """What this cache holds for `prompt`: the keys and values of its longest cached
        prefix, less its last token (whose logits the pass must compute), or the whole prompt
        with its next-token logits when an entry is exactly the prompt and kept them."""
        import torch

        if not self.enabled:
            return NOTHING_CACHED
        n = len(prompt)
        match = self.lookup(torch.tensor(prompt, dtype=torch.long))
        if match is None:
            return NOTHING_CACHED
        whole = match.length == n == match.entry.tokens.numel()
        if whole and match.entry.next_logits is not None:
            return CachedPrefix(n, match.entry.kv, match.entry.next_logits)
        reuse = min(match.length, n - 1)
        past = [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in match.entry.kv] if reuse else None
        return CachedPrefix(reuse, past, None)

    def insert(
        self,
        tokens: Sequence[int],
        kv: KV,
        next_logits: torch.Tensor | None = None,
        *,
        version: int | None = None,
    ) -> bool:
        """Store `kv` (batch size 1, one column per token) for `tokens`, computed with weights
        `version` (None: the cache's); evict the least recently used entries to stay within
        the budget. The tensors are kept as given: pass tensors nobody else writes to. Entries
        of that version that are prefixes of `tokens` are dropped. Returns False when the
        entry alone is over the budget, or of another version than the cache's (nothing is
        stored: no lookup would match it)."""
        import torch

        version = self.version if version is None else version
        if not self.enabled or not tokens or version != self.version:
            return False
        nbytes = kv_bytes(kv)
        if next_logits is not None:
            nbytes += next_logits.nelement() * next_logits.element_size()
        if nbytes > self.budget_bytes:
            return False
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        for key, entry in list(self._entries.items()):
            n = entry.tokens.numel()
            if (
                entry.version == version
                and n <= ids.numel()
                and _common_prefix(entry.tokens, ids) == n
            ):
                self._drop(key)  # the new entry covers it
        entry = PrefixEntry(ids, kv, next_logits, nbytes, version)
        self._entries[self._next_key] = entry
        self._next_key += 1
        self._bytes += nbytes
        while self._bytes > self.budget_bytes:
            self._drop(next(iter(self._entries)))
            self._evictions += 1
        return True

    def new_version(self, version: int) -> None:
        """New weights are loaded: entries and lookups are of `version` from now on, and the
        entries of every other version (stale keys and values) are dropped."""
        self.version = version
        for key, entry in list(self._entries.items()):
            if entry.version != version:
                self._drop(key)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._bytes = 0

    def _drop(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).nbytes


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the longest common prefix of two 1-D tensors."""
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if differ.numel() else n
