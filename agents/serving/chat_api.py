"""`POST /v1/chat/completions`: plan, answer (plain or streamed), capture."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.engine.constraints import Constraint, ToolFunction
from skyrl_sdk.agents.policy import TokenChunk
from skyrl_sdk.agents.serving.generation import (
    Reply,
    TextDeltas,
    reply,
    until_disconnect,
)
from skyrl_sdk.agents.serving.prompts import (
    chat_prompt,
    normalize_messages,
)
from skyrl_sdk.agents.serving.protocol import (
    ApiError,
    ChatRequest,
    usage,
)
from skyrl_sdk.agents.serving.sse import DONE, event
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import PrimedStream, guarded, merge
from skyrl_sdk.agents.serving.structured import (
    FORCED_FORMAT,
    SYNTAX,
    constrain,
    response_format_constraint,
    tool_choice_constraint,
)
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat


def plan_chat(server: Server, request: Request, req: ChatRequest) -> Plan:
    """A chat request validated and rendered: prompt ids (known replies as their sampled ids), sampling, tool format."""
    server.check_model(req.model)
    if req.top_logprobs and not req.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    session = server.session_of(request, req.user)
    messages = normalize_messages(req.messages)
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    check_tool_choice(req)
    offered = bool(tools) and req.tool_choice != "none"
    renderer = server.renderer
    if renderer is None:
        prompt: tuple[int, ...] = ()
        stop_ids: Sequence[int] = ()
    else:
        rendered = chat_prompt(
            renderer, messages, tools, server.store.replies(session), server.context_limit
        )
        prompt, stop_ids = rendered.token_ids, renderer.stop_token_ids
    param = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    sampling = server.sampling(
        req,
        len(prompt),
        stop_token_ids=stop_ids,
        top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
        limit_param=param,
    )
    constraint, param, forced_format = chat_constraint(server, req)
    tokenizer = renderer.tokenizer if renderer is not None else None
    sampling = constrain(server.policy, tokenizer, sampling, constraint, param=param)
    return Plan(
        session=session,
        prompt=prompt,
        messages=tuple(messages),
        sampling=sampling,
        n=req.n,
        stops=req.stops(),
        tool_format=forced_format or (server.config.tool_format if offered else None),
    )


def chat_constraint(
    server: Server, req: ChatRequest
) -> tuple[Constraint | None, str, ToolOutputFormat | None]:
    """What constrained decoding enforces for `req` (a forcing `tool_choice` or a JSON
    `response_format`), the field it comes from, and how a forced reply's calls are parsed."""
    fmt = response_format_constraint(req.response_format)
    choice = req.tool_choice
    if isinstance(choice, dict):
        choice = (choice.get("function") or {}).get("name")
    if not req.tools or choice in (None, "auto", "none"):
        return fmt, "response_format", None
    if fmt is not None:
        raise ApiError(
            400,
            "response_format cannot be enforced together with a forced tool_choice",
            param="response_format",
        )
    functions = [ToolFunction(t.function.name, t.function.parameters) for t in req.tools]
    forced = tool_choice_constraint(
        functions,
        choice,
        server.config.tool_format,
        parallel=req.parallel_tool_calls is not False,
    )
    return forced, "tool_choice", FORCED_FORMAT[SYNTAX[server.config.tool_format]]


def check_tool_choice(req: ChatRequest) -> None:
    """`tool_choice` needs `tools`, and a named function must be one of them (as OpenAI
    checks). A forcing choice is enforced by constrained decoding (`chat_constraint`)."""
    if req.tool_choice is None or req.tool_choice == "none":
        return
    if not req.tools:
        raise ApiError(400, "tool_choice is only allowed when tools are given", param="tool_choice")
    if isinstance(req.tool_choice, dict):
        function = req.tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if name not in {t.function.name for t in req.tools}:
            raise ApiError(
                400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
            )


def chat_choice(server: Server, req: ChatRequest, index: int, r: Reply) -> dict[str, Any]:
    """One choice of a non-streamed chat answer."""
    message: dict[str, Any] = {"role": "assistant", "content": r.content, "refusal": None}
    if r.output.calls:
        message["tool_calls"] = r.output.openai_calls()
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": server.chat_logprobs(r.completion, req.top_logprobs or 0)
        if req.logprobs
        else None,
        "finish_reason": r.finish_reason,
    }
    if req.return_token_ids:
        choice["token_ids"] = list(r.completion.token_ids)
    return choice


async def chat_response(server: Server, request: Request, req: ChatRequest, plan: Plan) -> Any:
    """The non-streamed chat answer (every choice generated together; choice 0 captured)."""
    replies, llm_s = await until_disconnect(request.receive, server.generate(plan))
    for i, r in enumerate(replies):
        await server.capture(plan, i, r, llm_s)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": server.config.model_name,
        "choices": [chat_choice(server, req, i, r) for i, r in enumerate(replies)],
        "usage": usage(len(plan.prompt), sum(len(r.completion.token_ids) for r in replies)),
        "system_fingerprint": None,
    }
    if req.return_token_ids:
        body["prompt_token_ids"] = list(plan.prompt)
    return body


async def chat_events(
    server: Server, req: ChatRequest, plan: Plan, first: PrimedStream
) -> AsyncIterator[bytes]:
    """The streamed chat answer as SSE events: role, content deltas, tool-call deltas, finish, usage, [DONE]."""
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": server.config.model_name,
        "system_fingerprint": None,
    }
    totals = [0] * plan.n

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        choice.update(extra)
        payload = {**head, "choices": [choice]}
        if req.include_usage:
            payload["usage"] = None
        return event(payload)

    async def one(index: int, stream: PrimedStream) -> AsyncIterator[bytes]:
        yield chunk(index, {"role": "assistant", "content": ""})
        deltas = TextDeltas(server.renderer, plan.stops, tools=plan.tool_format is not None)
        completion = None
        async for item in stream:
            if isinstance(item, TokenChunk):
                text = deltas.push(item.token_ids)
                if text:
                    yield chunk(index, {"content": text})
            else:
                completion = item
        assert completion is not None
        r = reply(completion, plan.stops, plan.tool_format)
        await server.capture(plan, index, r, stream.elapsed())
        totals[index] = len(completion.token_ids)
        rest = deltas.finish(r.content or "")
        if rest:
            yield chunk(index, {"content": rest})
        if r.output.calls:
            calls = [{**call, "index": k} for k, call in enumerate(r.output.openai_calls())]
            yield chunk(index, {"tool_calls": calls})
        extra: dict[str, Any] = {}
        if req.return_token_ids:
            extra["token_ids"] = list(completion.token_ids)
        final = chunk(index, {}, r.finish_reason, **extra)
        if req.logprobs:
            # All of the choice's logprobs at once, with its last chunk (clients concatenate).
            final = chunk(
                index,
                {},
                r.finish_reason,
                **{**extra, "logprobs": server.chat_logprobs(completion, req.top_logprobs or 0)},
            )
        yield final

    streams = [first] + [PrimedStream(server, plan, i) for i in range(1, plan.n)]
    async for data in guarded(merge([one(i, s) for i, s in enumerate(streams)])):
        yield data
    if req.include_usage:
        payload = {**head, "choices": [], "usage": usage(len(plan.prompt), sum(totals))}
        yield event(payload)
    yield DONE
