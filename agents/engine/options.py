"""`RequestOptions`: what a request asks of the engine beyond `SamplingParams`.

`SamplingParams` is the `Policy` protocol's (every policy understands it); these are the
engine's own extras, carried on its `Request`, for callers with stricter wire contracts (the
Tinker server, `trainer.tinker`): which distribution a sampled token's logprob is taken
from, the logprob of every prompt token, and stop strings matched at the end of the decoded
sample rather than anywhere in its last tokens. The defaults are what `LocalEngine` does.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class LogprobMode(enum.Enum):
    """Which distribution a sampled token's logprob is taken from."""

    SAMPLED = "sampled"
    """The sampling distribution's: temperature applied, before top-k/top-p (as vLLM)."""
    RAW = "raw"
    """The model's own: `log_softmax` of the raw logits, whatever the temperature (Tinker's)."""


@dataclass(frozen=True)
class RequestOptions:
    """A request's engine-level options (see the module docstring)."""

    logprobs: LogprobMode = LogprobMode.SAMPLED
    """Which distribution each sampled token's logprob comes from."""
    prompt_logprobs: bool = False
    """Also score the prompt: the logprob of each prompt token given those before it (None
    for the first). Such a prompt is computed whole, in a pass of its own (no cached prefix,
    no mixed step), since every position's logits are needed."""
    stop_suffixes: tuple[str, ...] = ()
    """Stop strings matched at the end of the whole decoded sample
    (`tokenizer.decode(ids).endswith(s)`, Tinker's rule), besides `SamplingParams.stop`."""


DEFAULT_OPTIONS = RequestOptions()
"""`LocalEngine`'s behaviour."""
