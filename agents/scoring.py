"""`Scorer`: the logprobs a model gives a completion it did not necessarily sample.

One interface for every side that can score token ids under its current weights: the local
engine (`LocalEngine.score`, through its rollout path with the prefix cache on), vLLM
(`VLLMEngine.score`, prompt logprobs), Tinker (`trainer.backends.tinker`: a sampling client's
`compute_logprobs` for the engine, a training client's forward pass for the learner) and the
torch learner (`trainer.learner.Learner.score`). The trainer's weight-sync check
(`trainer.sync_check`) compares an engine's and a learner's scores of the same tokens at the
same version; a distillation teacher is any `Scorer`.

Scores are the model's own distribution: `log_softmax` of the raw logits, no temperature,
top-k or top-p, so any two scorers of the same weights agree up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Scorer(Protocol):
    """Scores token ids under the weights it holds now."""

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """The logprob of each token of `completion_ids` given `prompt_ids` and the
        completion tokens before it (one float per completion token)."""
        ...
