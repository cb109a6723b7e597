"""`WeightSync`: new weights handed to a running engine, loaded between two steps.

`update_weights(state_dict, version)` may be called at any time from any thread; the worker
loads the new weights between two decoding steps, so requests in flight continue with the new
weights (their keys and values from the old weights are kept, as vLLM's "keep" pause does),
and each token records the version that produced it. Loading new weights empties the prefix
cache, and a sequence whose keys and values mix versions is not stored, so a new request never
reuses keys and values computed with old weights.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
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
        """Emptied when new weights load."""
        self.version = version
        """Version of the weights now loaded."""
        self._pending: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)

    def queue(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Queue new weights (the latest call wins if several arrive between two steps)."""
        with self._lock:
            self._pending = (state_dict, version)

    def apply(self) -> None:
        """Load the queued weights, if any (the worker, between two steps)."""
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None:
                return
            state_dict, version = pending
            import torch

            with torch.no_grad():
                self.model.load_state_dict(state_dict, strict=True)
            self.version = version
            self.prefix_cache.clear()  # keys and values of the old weights: never reused
            self._applied.notify_all()

    def wait_for(self, version: int, timeout: float | None) -> bool:
        """Block until weights of at least `version` are loaded; False on timeout."""
        with self._applied:
            return self._applied.wait_for(lambda: self.version >= version, timeout)
