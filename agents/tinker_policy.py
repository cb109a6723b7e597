"""`TinkerPolicy`: a Tinker `SamplingClient` as a `Policy` (token ids in, ids + logprobs out).

Any Tinker API endpoint works: ours (`skyrl tinker serve`) or a hosted one. The prompt goes
out as the exact token ids the agent loop will train on, and every sampled id comes back with
its sampler logprob, so trajectories are trainable. `use(client, version)` points the policy at
new weights (a sampling client of a newer checkpoint); later calls sample from them and tag
their tokens with that version.

The `tinker` SDK is the `tinker` extra; this module imports it only when sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    PolicyError,
    SamplingParams,
)

TINKER_EXTRA = "pip install 'skyrl-sdk[tinker]'"
"""How to install the SDK (named in import errors)."""


def import_tinker() -> Any:
    """The `tinker` module, or an `ImportError` naming the extra."""
    try:
        import tinker
    except ImportError as e:
        raise ImportError(f"the Tinker backend needs the tinker SDK: {TINKER_EXTRA}") from e
    return tinker


class TinkerPolicy:
    """Samples from a Tinker `SamplingClient`; one `sample` request per turn.

    `sampling_client` may be None until `use` gives one; `tokenizer` is the base model's
    (`TrainingClient.get_tokenizer()`), with a chat template or `chat_template=`.
    """

    def __init__(
        self,
        sampling_client: Any | None,
        tokenizer: Any,
        *,
        version: int = 0,
        name: str = "tinker",
        chat_template: str | None = None,
    ):
        self.name = name
        self._renderer = ChatRenderer(tokenizer, chat_template)
        self._client = sampling_client
        self.version = version
        """Policy version of the weights `sampling_client` samples from."""

    @property
    def renderer(self) -> ChatRenderer:
        return self._renderer

    def use(self, sampling_client: Any, version: int) -> None:
        """Sample from `sampling_client` (weights of policy `version`) from now on."""
        self._client = sampling_client
        self.version = version

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        types = import_tinker().types
        client, version = self._client, self.version
        if client is None:
            raise PolicyError("no sampling client yet: call use(client, version) first")
        response = await client.sample(
            types.ModelInput.from_ints(list(prompt_token_ids)), 1, to_tinker_params(sampling)
        )
        if len(response.sequences) != 1:
            raise PolicyError(f"asked for 1 sample, got {len(response.sequences)}")
        seq = response.sequences[0]
        tokens = tuple(int(t) for t in seq.tokens)
        if seq.logprobs is None or len(seq.logprobs) != len(tokens):
            raise PolicyError("the Tinker sampler returned no logprob per sampled token")
        return Completion(
            token_ids=tokens,
            logprobs=tuple(float(x) for x in seq.logprobs),
            text=self._renderer.content_text(tokens),
            finish_reason=FinishReason.STOP if seq.stop_reason == "stop" else FinishReason.LENGTH,
            policy_version=version,
        )

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Each completion token's logprob under the sampling client's weights
        (`agents.scoring.Scorer`), from its `compute_logprobs` of the whole sequence."""
        types = import_tinker().types
        if self._client is None:
            raise PolicyError("no sampling client yet: call use(client, version) first")
        if not prompt_ids or not completion_ids:
            raise ValueError("scoring needs a non-empty prompt and completion")
        sequence = [*prompt_ids, *completion_ids]
        logprobs = await self._client.compute_logprobs(types.ModelInput.from_ints(sequence))
        scored = list(logprobs)[len(prompt_ids) :]
        if len(scored) != len(completion_ids) or any(x is None for x in scored):
            raise PolicyError("the Tinker sampler returned no logprob per completion token")
        return [float(x) for x in scored]

    async def aclose(self) -> None:
        """Nothing to release: the sampling client belongs to whoever made it."""


def to_tinker_params(sampling: SamplingParams) -> Any:
    """Our `SamplingParams` as `tinker.types.SamplingParams`.

    Tinker stops on strings or on token ids, not both in one request; with neither it stops
    at EOS. `top_k=0` (off) is Tinker's -1.
    """
    types = import_tinker().types
    if sampling.stop and sampling.stop_token_ids:
        raise PolicyError(
            "a Tinker sampler stops on strings or on token ids, not both: "
            f"got stop={sampling.stop!r} and stop_token_ids={sampling.stop_token_ids!r}"
        )
    stop: list[str] | list[int] | None = None
    if sampling.stop:
        stop = list(sampling.stop)
    elif sampling.stop_token_ids:
        stop = list(sampling.stop_token_ids)
    return types.SamplingParams(
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else -1,
        stop=stop,
        seed=sampling.seed,
    )
