"""`WeightSync`: new weights handed to a running engine, loaded between two steps.

`update_weights(state_dict, version)` may be called at any time from any thread; the worker
loads the new weights between two decoding steps, so requests in flight continue with the new
weights (their keys and values from the old weights are kept, as vLLM's "keep" pause does),
and each token records the version that produced it. Loading new weights moves the prefix
cache to the new version (`PrefixCache.new_version`: older entries are dropped, lookups match
only the new version), and a sequence whose keys and values mix versions is not stored, so a
new request never reuses keys and values computed with old weights.

`at_loaded_weights(job)` runs a function on the worker between two steps, right after any
weights queued before it are loaded: it sees exactly the weights (and prefix cache) a request
admitted then would. `LocalEngine.score` runs there, so the trainer's sync check scores the
version it published before any decoding step samples from it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from skyrl_sdk.agents.engine.prefix_cache import PrefixCache


class WeightSync:
    """The loaded weights' version and the update waiting to be loaded (thread-safe)."""

    def __init__(self, model: Any, prefix_cache: PrefixCache, version: int):
        self.model = model
        """The model whose weights are replaced."""
        self.prefix_cache = prefix_cache
        """Moved to each new version as its weights load (`PrefixCache.new_version`)."""
        self.version = version
        """Version of the weights now loaded."""
        prefix_cache.new_version(version)
        self._pending: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._jobs: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)

    def queue(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Queue new weights (the latest call wins if several arrive between two steps)."""
        with self._lock:
            self._pending = (state_dict, version)

    def at_loaded_weights(self, job: Callable[[], None]) -> None:
        """Run `job` on the worker between two steps, after the weights queued so far load
        (it must not raise: it reports its own outcome)."""
        with self._lock:
            self._jobs.append(job)

    def apply(self) -> None:
        """Load the queued weights, if any, then run the queued jobs (the worker, between two
        steps)."""
        with self._lock:
            pending, self._pending = self._pending, None
            jobs, self._jobs = self._jobs, []
            if pending is not None:
                self._load(*pending)
        for job in jobs:
            job()

    def _load(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        import torch

        with torch.no_grad():
            self.model.load_state_dict(state_dict, strict=True)
        self.version = version
        self.prefix_cache.new_version(version)  # keys and values of old weights: never reused
        self._applied.notify_all()

    def wait_for(self, version: int, timeout: float | None) -> bool:
        """Block until weights of at least `version` are loaded; False on timeout."""
        with self._applied:
            return self._applied.wait_for(lambda: self.version >= version, timeout)
