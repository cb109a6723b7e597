"""`POST /v1/completions`: text or token-id prompts (vLLM's extensions), plain or streamed."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.policy import SamplingParams, TokenChunk
from skyrl_sdk.agents.serving.generation import (
    Reply,
    TextDeltas,
    reply,
    until_disconnect,
)
from skyrl_sdk.agents.serving.prompts import encode_within
from skyrl_sdk.agents.serving.protocol import (
    ApiError,
    CompletionRequest,
    usage,
)
from skyrl_sdk.agents.serving.sse import DONE, event
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import PrimedStream, guarded, merge
from skyrl_sdk.agents.serving.structured import (
    constrain,
    response_format_constraint,
    structured_outputs_constraint,
)


def plan_completion(server: Server, request: Request, req: CompletionRequest) -> Plan:
    """A completions request validated: prompt ids (text tokenized, ids checked against the vocabulary), sampling."""
    server.check_model(req.model)
    if req.echo:
        raise ApiError(400, "echo is not supported", param="echo")
    renderer = server.renderer
    if renderer is None:
        raise ApiError(
            400,
            "this server's policy has no tokenizer: use /v1/chat/completions",
            param="prompt",
        )
    limit = server.context_limit
    if isinstance(req.prompt, str):
        encoded = encode_within(renderer, req.prompt, limit)
        if encoded is None:
            raise ApiError(
                400,
                f"the prompt is far longer than the model's context of {limit} tokens",
                param="prompt",
                code="context_length_exceeded",
            )
        prompt = tuple(encoded)
    else:
        prompt = tuple(req.prompt)
        vocab = len(renderer.tokenizer)
        bad = next((t for t in prompt if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(
                400, f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param="prompt"
            )
    if not prompt:
        raise ApiError(400, "the prompt is empty", param="prompt")
    sampling = server.sampling(
        req,
        len(prompt),
        stop_token_ids=req.stop_token_ids,
        top_logprobs=req.logprobs or 0,
        limit_param="max_tokens",
    )
    sampling = constrain_completion(server, req, sampling)
    session = server.session_of(request, req.user)
    return Plan(session, prompt, (), sampling, req.n, req.stops(), None)


def constrain_completion(
    server: Server, req: CompletionRequest, sampling: SamplingParams
) -> SamplingParams:
    """`sampling` with the request's `response_format` or `structured_outputs` enforced."""
    fmt = response_format_constraint(req.response_format)
    grammar = structured_outputs_constraint(req.structured_outputs)
    if fmt is not None and grammar is not None:
        raise ApiError(
            400, "give response_format or structured_outputs, not both", param="structured_outputs"
        )
    param = "response_format" if fmt is not None else "structured_outputs"
    tokenizer = server.renderer.tokenizer if server.renderer is not None else None
    return constrain(server.policy, tokenizer, sampling, fmt or grammar, param=param)


def completion_choice(
    server: Server, req: CompletionRequest, plan: Plan, index: int, r: Reply
) -> dict[str, Any]:
    """One choice of a non-streamed completions answer."""
    c = r.completion
    choice: dict[str, Any] = {
        "index": index,
        "text": r.text,
        "logprobs": server.completion_logprobs(c, req.logprobs or 0)
        if req.logprobs is not None
        else None,
        "finish_reason": r.finish_reason,
    }
    if req.return_token_ids:
        choice["token_ids"] = list(c.token_ids)
        choice["prompt_token_ids"] = list(plan.prompt)
    return choice


async def completion_response(
    server: Server, request: Request, req: CompletionRequest, plan: Plan
) -> Any:
    """The non-streamed completions answer."""
    replies, llm_s = await until_disconnect(request.receive, server.generate(plan))
    for i, r in enumerate(replies):
        await server.capture(plan, i, r, llm_s)
    choices = [completion_choice(server, req, plan, i, r) for i, r in enumerate(replies)]
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:24]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": server.config.model_name,
        "choices": choices,
        "usage": usage(len(plan.prompt), sum(len(r.completion.token_ids) for r in replies)),
        "policy_version": max(r.completion.policy_version for r in replies),
    }


async def completion_events(
    server: Server, req: CompletionRequest, plan: Plan, first: PrimedStream
) -> AsyncIterator[bytes]:
    """The streamed completions answer as SSE events."""
    head = {
        "id": f"cmpl-{uuid.uuid4().hex[:24]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": server.config.model_name,
    }
    totals = [0] * plan.n

    def chunk(index: int, text: str, finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        choice.update(extra)
        payload = {**head, "choices": [choice]}
        if req.include_usage:
            payload["usage"] = None
        return event(payload)

    async def one(index: int, stream: PrimedStream) -> AsyncIterator[bytes]:
        deltas = TextDeltas(server.renderer, plan.stops, tools=False)
        completion = None
        async for item in stream:
            if isinstance(item, TokenChunk):
                text = deltas.push(item.token_ids)
                if text:
                    yield chunk(index, text)
            else:
                completion = item
        assert completion is not None
        r = reply(completion, plan.stops, None)
        await server.capture(plan, index, r, stream.elapsed())
        totals[index] = len(completion.token_ids)
        extra: dict[str, Any] = {}
        if req.return_token_ids:
            extra["token_ids"] = list(completion.token_ids)
            extra["prompt_token_ids"] = list(plan.prompt)
        if req.logprobs is not None:
            extra["logprobs"] = server.completion_logprobs(completion, req.logprobs)
        yield chunk(index, deltas.finish(r.text), r.finish_reason, **extra)

    streams = [first] + [PrimedStream(server, plan, i) for i in range(1, plan.n)]
    async for data in guarded(merge([one(i, s) for i, s in enumerate(streams)])):
        yield data
    if req.include_usage:
        yield event({**head, "choices": [], "usage": usage(len(plan.prompt), sum(totals))})
    yield DONE
