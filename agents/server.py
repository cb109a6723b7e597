"""`skyrl serve`: an OpenAI-compatible HTTP server over a `LocalEngine`.

Implements the subset agents need: `GET /v1/models`, `POST /v1/completions` (prompt as text
or token ids; returns `token_ids` and `logprobs` like vLLM with `return_token_ids`),
`POST /v1/chat/completions` (text only), and `GET /health`. Requests from concurrent clients
are batched by the engine.

Every request passes `skyrl_sdk.http_guard.HttpGuard` first: with an API key set, a request
without `Authorization: Bearer KEY` (what the `openai` SDK sends) gets 401 in OpenAI's error
shape, and any body larger than `max_request_bytes` gets 413 before it is read or parsed.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from skyrl_sdk.agents.policy import Completion, SamplingParams
from skyrl_sdk.http_guard import DEFAULT_MAX_REQUEST_BYTES, ErrorStyle, GuardConfig, install

if TYPE_CHECKING:
    from fastapi import FastAPI

    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.local_engine import LocalEngine

PIECE_CHARS = 1 << 14
"""A prompt longer than this many characters is first counted in pieces this long."""


class CompletionRequest(BaseModel):
    """`POST /v1/completions` body (OpenAI fields plus vLLM's token-id extensions)."""

    model: str | None = None
    prompt: str | list[int]
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    seed: int | None = None
    logprobs: int | None = None
    return_token_ids: bool = False
    n: int = 1


class ChatRequest(BaseModel):
    """`POST /v1/chat/completions` body."""

    model: str | None = None
    messages: list[dict[str, Any]]
    max_tokens: int | None = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


def encode_within(renderer: ChatRenderer, text: str, limit: int | None) -> tuple[int, ...] | None:
    """`text`'s token ids, or None if it has far more than `limit` tokens.

    Tokenizing a whole long text is what costs: a 48 MB prompt took the tiny model's tokenizer
    to 7.7 GB and 100 s, only to be refused for its length. So a long text is first counted in
    pieces, stopping once the count passes twice the limit (pieces tokenized apart may differ
    from the whole by a token or two at each cut, hence the margin); memory stays that of one
    piece, time that of about `2 * limit` tokens.
    """
    if limit is not None and len(text) > PIECE_CHARS:
        count = 0
        for start in range(0, len(text), PIECE_CHARS):
            count += len(renderer.encode(text[start : start + PIECE_CHARS]))
            if count > 2 * limit:
                return None
    return renderer.encode(text)


OPEN_PATHS = frozenset({"/health"})
"""Served without a key: liveness probes (orchestrators, our own start-up waits) carry no
credentials, and the answer reveals nothing but that the server is up."""


def create_app(
    engine: LocalEngine,
    model_name: str = "tiny",
    *,
    api_key: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> FastAPI:
    """The FastAPI app serving `engine` under the name `model_name`.

    `api_key`: the key every request but `GET /health` must carry (None: no authentication;
    bind loopback only). `max_request_bytes`: larger bodies get 413 unread.
    """
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="skyrl serve")
    install(
        app,
        GuardConfig(
            api_key=api_key,
            max_request_bytes=max_request_bytes,
            open_paths=OPEN_PATHS,
            error_style=ErrorStyle.OPENAI,
        ),
    )
    renderer = engine.renderer

    def check(n: int, model: str | None) -> None:
        if n != 1:
            raise HTTPException(400, "only n=1 is supported")
        if model not in (None, model_name):
            raise HTTPException(404, f"model {model!r} is not served here; try {model_name!r}")

    def usage(prompt_len: int, c: Completion) -> dict[str, int]:
        return {
            "prompt_tokens": prompt_len,
            "completion_tokens": len(c.token_ids),
            "total_tokens": prompt_len + len(c.token_ids),
        }

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "owned_by": "skyrl"}],
        }

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> dict[str, Any]:
        check(req.n, req.model)
        limit = engine.max_context_tokens
        if isinstance(req.prompt, str):
            encoded = encode_within(renderer, req.prompt, limit)
            if encoded is None:
                raise HTTPException(400, f"the prompt is far longer than the context ({limit})")
            prompt = list(encoded)
        else:
            prompt = req.prompt
        if not prompt:
            raise HTTPException(400, "empty prompt")
        if limit is not None and len(prompt) + req.max_tokens > limit:
            raise HTTPException(
                400, f"{len(prompt)} prompt tokens + max_tokens {req.max_tokens} exceed {limit}"
            )
        sampling = SamplingParams(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=_stops(req.stop),
            stop_token_ids=tuple(req.stop_token_ids),
            seed=req.seed,
        )
        c = await engine.generate(prompt, sampling)
        choice: dict[str, Any] = {
            "index": 0,
            "text": renderer.decode(c.token_ids),
            "finish_reason": c.finish_reason.value,
        }
        if req.logprobs is not None:
            choice["logprobs"] = {
                "tokens": [renderer.decode([i]) for i in c.token_ids],
                "token_logprobs": list(c.logprobs or ()),
            }
        if req.return_token_ids:
            choice["token_ids"] = list(c.token_ids)
            choice["prompt_token_ids"] = prompt
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [choice],
            "usage": usage(len(prompt), c),
            "policy_version": c.policy_version,
        }

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest) -> dict[str, Any]:
        check(req.n, req.model)
        text = renderer.render(req.messages, add_generation_prompt=True)  # type: ignore[arg-type]
        encoded = encode_within(renderer, text, engine.max_context_tokens)
        if encoded is None:
            raise HTTPException(
                400, f"the messages are far longer than the context ({engine.max_context_tokens})"
            )
        prompt = encoded
        sampling = SamplingParams(
            max_tokens=req.max_tokens or 256,
            temperature=req.temperature,
            top_p=req.top_p,
            stop=_stops(req.stop),
            stop_token_ids=renderer.stop_token_ids,
            seed=req.seed,
        )
        c = await engine.generate(prompt, sampling)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason.value,
                }
            ],
            "usage": usage(len(prompt), c),
        }

    return app
