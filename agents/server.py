"""`skyrl serve`: an OpenAI-compatible HTTP server over a `LocalEngine`.

Implements the subset agents need: `GET /v1/models`, `POST /v1/completions` (prompt as text
or token ids; returns `token_ids` and `logprobs` like vLLM with `return_token_ids`),
`POST /v1/chat/completions` (text only), and `GET /health`. Requests from concurrent clients
are batched by the engine.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from skyrl_sdk.agents.policy import Completion, SamplingParams

if TYPE_CHECKING:
    from fastapi import FastAPI

    from skyrl_sdk.agents.local_engine import LocalEngine


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


def create_app(engine: LocalEngine, model_name: str = "tiny") -> FastAPI:
    """The FastAPI app serving `engine` under the name `model_name`."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="skyrl serve")
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
        prompt = list(renderer.encode(req.prompt)) if isinstance(req.prompt, str) else req.prompt
        if not prompt:
            raise HTTPException(400, "empty prompt")
        limit = engine.max_context_tokens
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
        prompt = renderer.prompt(req.messages).token_ids  # type: ignore[arg-type]
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
