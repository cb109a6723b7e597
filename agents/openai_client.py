"""`OpenAIClient`: any OpenAI-compatible server (vLLM, SGLang, OpenAI, `skyrl serve`) as a `Policy`.

Two ways to talk to it:
- **tokens** (`/v1/completions`): the prompt is sent as token ids and the server returns the
  sampled ids and their logprobs (vLLM with `return_token_ids`, `skyrl serve`). The
  trajectory is exact and trainable.
- **chat** (`/v1/chat/completions`): the server gets messages and returns text only. The
  completion is marked `text_only`; if a tokenizer is known its ids are a re-tokenization,
  so the trajectory is kept for evaluation but is not trainable.

`ApiMode.AUTO` tries tokens first and falls back to chat for good (logged once) when the
server does not return token ids. Transient failures (connection errors, 429, 5xx) are
retried with exponential backoff; anything else raises `PolicyError` with the server's reply.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    PolicyError,
    SamplingParams,
)

log = logging.getLogger(__name__)


class ApiMode(enum.Enum):
    """Which endpoint the client uses."""

    AUTO = "auto"
    """Token ids through `/completions` when the server returns them, else chat."""
    TOKENS = "tokens"
    """Only `/completions` with token ids; a server without them is an error."""
    CHAT = "chat"
    """Only `/chat/completions` (text in, text out; not trainable)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Timeouts and retries for one request."""

    attempts: int = 4
    """Tries per request, the first included."""
    backoff_s: float = 0.5
    """Wait before the second try; doubles each time."""
    max_backoff_s: float = 8.0
    """Upper bound on one wait."""
    timeout_s: float = 120.0
    """Seconds for one HTTP request (connect + response)."""


class ServerError(PolicyError):
    """The server answered with an HTTP error that retrying will not fix."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
        """The HTTP status code."""


_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


class OpenAIClient:
    """A `Policy` over an OpenAI-compatible HTTP API."""

    supports_constraints = True
    """`SamplingParams.constraint` is passed on to the server (`Constraint.upstream`)."""
    passes_constraints_through = True
    """The server, not this client, compiles and enforces the grammar."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        renderer: ChatRenderer | None = None,
        api: ApiMode = ApiMode.AUTO,
        api_key: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._renderer = renderer
        self.retry = retry
        if api is not ApiMode.CHAT and renderer is None:
            # Token ids need a tokenizer on our side: without one, chat is all we can do.
            api = ApiMode.CHAT
        self.api = api
        self.name = f"openai:{self.base_url}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(retry.timeout_s),
            transport=transport,
        )
        self._model_lock = asyncio.Lock()

    @property
    def renderer(self) -> ChatRenderer | None:
        return self._renderer

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        model = await self._model_name()
        if self.api is not ApiMode.CHAT:
            completion = await self._completions(model, prompt_token_ids, sampling, context)
            if completion is not None:
                return completion
            if self.api is ApiMode.TOKENS:
                raise PolicyError(
                    f"{self.base_url} returned no token ids from /completions; "
                    "use api=chat (text-only, not trainable) or a server that returns them"
                )
            log.warning("%s returns no token ids: falling back to chat (text-only)", self.base_url)
            self.api = ApiMode.CHAT
        return await self._chat(model, sampling, context)

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- endpoints ------------------------------------------------------------------------

    async def _completions(
        self,
        model: str,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        context: GenerationContext | None,
    ) -> Completion | None:
        """Token-in/token-out; None when the server does not return token ids."""
        assert self._renderer is not None
        body: dict[str, Any] = {
            "model": model,
            "prompt": list(prompt_token_ids),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 1,
            # vLLM extensions; other servers ignore unknown fields.
            "return_token_ids": True,
            "stop_token_ids": list(sampling.stop_token_ids),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.constraint is not None:
            body.update(sampling.constraint.upstream())
        try:
            data = await self._post("/completions", body, context)
        except ServerError as e:
            if self.api is ApiMode.AUTO and e.status in (400, 404, 422):
                return None  # no /completions, or it rejects token prompts
            raise
        choice = _first_choice(data)
        ids = choice.get("token_ids")
        if ids is None:
            return None
        ids = tuple(int(i) for i in ids)
        raw_logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        logprobs = tuple(float(x) for x in raw_logprobs) if raw_logprobs is not None else None
        if logprobs is not None and len(logprobs) != len(ids):
            raise PolicyError(f"server returned {len(logprobs)} logprobs for {len(ids)} token ids")
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            text=self._renderer.content_text(ids),
            finish_reason=_FINISH.get(choice.get("finish_reason") or "stop", FinishReason.STOP),
            policy_version=int(data.get("policy_version", 0)),
            constrained=sampling.constraint is not None,
        )

    async def _chat(
        self, model: str, sampling: SamplingParams, context: GenerationContext | None
    ) -> Completion:
        if context is None or not context.messages:
            raise PolicyError("chat completions need the conversation (GenerationContext.messages)")
        body: dict[str, Any] = {
            "model": model,
            "messages": [dict(m) for m in context.messages],
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.constraint is not None:
            body.update(sampling.constraint.upstream())
        data = await self._post("/chat/completions", body, context)
        choice = _first_choice(data)
        text = (choice.get("message") or {}).get("content") or ""
        ids: tuple[int, ...] = ()
        if self._renderer is not None:
            # A re-tokenization (the server's ids are unknown): good for counting and
            # viewing, marked text-only so no trainer uses it.
            ids = self._renderer.encode(text)
            if self._renderer.end_of_turn_id is not None:
                ids = (*ids, self._renderer.end_of_turn_id)
        return Completion(
            token_ids=ids,
            logprobs=None,
            text=text,
            finish_reason=_FINISH.get(choice.get("finish_reason") or "stop", FinishReason.STOP),
            text_only=True,
            constrained=sampling.constraint is not None,
        )

    # -- HTTP -----------------------------------------------------------------------------

    async def _model_name(self) -> str:
        if self.model is not None:
            return self.model
        async with self._model_lock:
            if self.model is None:
                data = await self._request("GET", "/models", None, None)
                models = data.get("data") or []
                if not models:
                    raise PolicyError(f"{self.base_url}/models lists no model; pass model=")
                self.model = str(models[0]["id"])
        return self.model

    async def _post(
        self, path: str, body: dict[str, Any], context: GenerationContext | None
    ) -> dict[str, Any]:
        return await self._request("POST", path, body, context)

    async def _request(
        self, method: str, path: str, body: dict[str, Any] | None, context: GenerationContext | None
    ) -> dict[str, Any]:
        # A session header lets routers keep an episode on one replica (warm prefix cache).
        headers = {"X-Session-ID": context.episode_id} if context is not None else {}
        delay = self.retry.backoff_s
        last: str = ""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                response = await self._http.request(method, path, json=body, headers=headers)
            except httpx.TransportError as e:  # connect refused, reset, timeout
                last = f"{type(e).__name__}: {e}"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError as e:
                        raise PolicyError(f"{method} {path}: response is not JSON") from e
                last = f"HTTP {response.status_code}: {response.text[:500]}"
                if response.status_code not in _RETRYABLE_STATUS:
                    raise ServerError(
                        f"{method} {self.base_url}{path} failed: {last}", response.status_code
                    )
            if attempt < self.retry.attempts:
                await asyncio.sleep(min(delay, self.retry.max_backoff_s))
                delay *= 2
        raise PolicyError(
            f"{method} {self.base_url}{path} failed after {self.retry.attempts} attempts: {last}"
        )


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise PolicyError(f"response has no choices: {str(data)[:300]}")
    return choices[0]
