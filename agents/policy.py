"""The `Policy` protocol: token ids in, a `Completion` (token ids, logprobs, text) out.

Every policy the agent loop talks to (scripted replays, an in-process transformers model, an
OpenAI-compatible server, in-process vLLM) implements this one coroutine. The loop hands over
the exact prompt token ids it will later give the trainer, so a token-native policy never sees
re-tokenized text; text-only backends are wrapped and mark their completions `text_only`.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from skyrl_sdk.tools.messages import Message

if TYPE_CHECKING:
    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.engine.constraints import Constraint


class FinishReason(enum.Enum):
    """Why a completion ended."""

    STOP = "stop"
    """A stop token (EOS, end of turn) or a stop string was produced."""
    LENGTH = "length"
    """`max_tokens` was reached first."""
    ABORT = "abort"
    """The engine gave up on the request (shutdown, cancelled)."""


class PolicyError(RuntimeError):
    """A policy could not produce a completion (server down after retries, bad response)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion."""

    max_tokens: int = 256
    """Upper bound on generated tokens, the stop token included."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass (1 keeps the whole distribution)."""
    top_k: int = 0
    """Keep only the k most likely tokens (0 turns it off)."""
    stop: tuple[str, ...] = ()
    """Stop strings; the completion ends with (and includes) the first one produced."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the completion (they are kept as its last token)."""
    seed: int | None = None
    """Seed for this request's sampler (None: nondeterministic)."""
    top_logprobs: int = 0
    """Also return this many most likely alternatives per sampled token (0: none)."""
    constraint: Constraint | None = None
    """A grammar the completion must follow (`agents.engine.constraints`), enforced by
    policies whose `supports_constraints` is true; None: unconstrained."""

    def with_stop_tokens(self, ids: Sequence[int]) -> SamplingParams:
        """A copy whose `stop_token_ids` also contains `ids`."""
        merged = tuple(dict.fromkeys((*self.stop_token_ids, *ids)))
        return replace(self, stop_token_ids=merged)


@dataclass(frozen=True)
class GenerationContext:
    """Where a generate call sits in an episode. Token-native policies may ignore it."""

    episode_id: str
    """The episode's id (also used as an HTTP session id for cache affinity)."""
    task_id: str
    """The task row's `task_id`."""
    turn: int
    """0-based index of the assistant turn being generated."""
    messages: tuple[Message, ...] = ()
    """The conversation so far as chat messages, for backends that only accept text."""


@dataclass(frozen=True)
class Completion:
    """One generated assistant turn."""

    token_ids: tuple[int, ...]
    """The sampled ids, in order, including a final stop token if one ended the turn."""
    logprobs: tuple[float, ...] | None
    """Sampler log-probability of each id in `token_ids` (None when the backend gives none)."""
    text: str
    """The decoded text of `token_ids` without a final stop token (stop strings are kept);
    this is the action handed to the env."""
    finish_reason: FinishReason
    """Why generation ended."""
    policy_version: int = 0
    """Weights version that produced the last token."""
    token_policy_versions: tuple[int, ...] = ()
    """Weights version per token when an in-flight update happened mid-turn; empty means
    every token came from `policy_version`."""
    text_only: bool = False
    """True when the backend returned text only: `token_ids` are then a re-tokenization, not
    the sampled ids, and the turn must not be trained on."""
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    """Per sampled token, the `SamplingParams.top_logprobs` most likely `(token_id, logprob)`
    alternatives, most likely first (None when not asked for or not supported)."""
    constrained: bool = False
    """True when a grammar masked the sampler (`SamplingParams.constraint`): `logprobs` are
    those of the masked, renormalised distribution, not the model's own."""

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"{len(self.logprobs)} logprobs for {len(self.token_ids)} tokens: they must align"
            )
        if self.token_policy_versions and len(self.token_policy_versions) != len(self.token_ids):
            raise ValueError("token_policy_versions must have one entry per token")
        if self.top_logprobs is not None and len(self.top_logprobs) != len(self.token_ids):
            raise ValueError("top_logprobs must have one entry per token")

    def versions(self) -> tuple[int, ...]:
        """The policy version of every token."""
        return self.token_policy_versions or (self.policy_version,) * len(self.token_ids)


@dataclass(frozen=True)
class TokenChunk:
    """Tokens a streaming policy has sampled since its previous chunk."""

    token_ids: tuple[int, ...]
    """The newly sampled ids, in order."""
    logprobs: tuple[float, ...] | None = None
    """Sampler log-probability of each id (None when the backend gives none)."""


@runtime_checkable
class Policy(Protocol):
    """Anything that turns prompt token ids into a completion."""

    name: str
    """Short description shown in results (`"local:/models/x"`, `"openai:http://..."`)."""

    @property
    def renderer(self) -> ChatRenderer | None:
        """The chat renderer for this policy's tokenizer (None: text-only, no token ids)."""
        ...

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        """Sample one completion continuing `prompt_token_ids`."""
        ...

    async def aclose(self) -> None:
        """Release connections, threads and models. Safe to call twice."""
        ...


@runtime_checkable
class StreamingPolicy(Policy, Protocol):
    """A `Policy` that can also hand out tokens as they are sampled (`skyrl serve` streams them).

    `generate_stream` yields `TokenChunk`s and then exactly one `Completion`, equal to what
    `generate` would have returned for the same arguments (same seed, same tokens); the chunks'
    ids concatenated are the completion's `token_ids`. Closing the iterator early (a client that
    disconnected) cancels the request and frees its slot in the engine.
    """

    def generate_stream(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> AsyncIterator[TokenChunk | Completion]:
        """Stream one completion continuing `prompt_token_ids`."""
        ...
