"""`POST /v1/messages` (the Anthropic Messages API) and `POST /v1/messages/count_tokens`.

Routes are added by `add_routes`, which `create_app` calls for every app; like every `/v1`
path they also answer under `/sessions/{id}/v1/messages`, behind the same keys (`auth`:
`x-api-key`, what the Anthropic SDK and Claude Code send, or `Authorization: Bearer`), body
cap, header deadline, session token budget, queue cap and fair share as chat completions
(`Server.admit`, `Server.sampling`). `anthropic-version` and `anthropic-beta` are accepted
and not checked.

A Messages turn is a chat turn: the system prompt and content blocks are folded into chat
messages (`messages_protocol.chat_messages`), rendered by the same `prompts.chat_prompt` (the
server's earlier replies spliced in as their sampled ids), sampled by the same
`Server.generate` / `streaming.start_stream`, parsed by the same `generation.reply` and
captured by the same `Server.capture`. So Claude Code's whole tool-using conversation is one
segment of sampled ids.

Side conversations: the first system prompt a session generates for names its main
conversation; a request with another system prompt (Claude Code's title and topic requests,
its sub-agents) is captured in segments of its own marked `auxiliary`
(`SegmentStart.AUXILIARY`), which neither continue nor break the main segment and are left
out of training samples by default. `count_tokens` samples nothing and is not captured.

Honoured:

- `system`: a string or text blocks (joined by newlines); `messages` with roles `user`,
  `assistant` and `system` (Claude Code's mid-conversation system turns), content a string or
  blocks: `text`; `tool_use` (assistant; as a chat tool call); `tool_result` (user; as a chat
  `tool` message, its content a string or text blocks, `is_error` rendered as an `Error: `
  prefix). `thinking` / `redacted_thinking` blocks are accepted and dropped. Images,
  documents and other blocks are a 400 naming the block. A final assistant message
  (prefill) is a 400: the reply always starts a new assistant turn.
- `tools` (client tools: `name`, `description`, `input_schema`; a server tool type is a 400
  naming it); `tool_choice`: `auto`; `none` (tools neither rendered nor parsed); `any` (one
  or more calls, one with `disable_parallel_tool_use`) and a named `tool` (one call of it)
  are enforced by constrained decoding (`structured`, a tool-call grammar in the served tool
  format masking the sampler: the calls are the model's own tokens, the turn is captured
  `constrained`); a policy without constrained decoding (`supports_constraints`) or a schema
  the grammar cannot take is a 400 naming `tool_choice`, never silently ignored; a named tool
  that is not in `tools` is a 400 too.
- `max_tokens` (required; clamped to what the context leaves, the reply then ending with
  `stop_reason: max_tokens`), `stop_sequences` (at most 4, cut from the text, reported as
  `stop_reason: stop_sequence` with `stop_sequence`), `temperature` (0 to 1), `top_p`,
  `top_k`, `stream`, `metadata.user_id` (the session when the URL names none); extension:
  `seed`.
- The answer: `content` blocks (`text`, then one `tool_use` per call, ids `toolu_...`),
  `stop_reason` (`end_turn`, `max_tokens`, `stop_sequence`, `tool_use`), `usage`
  (`input_tokens`: prompt ids, `output_tokens`: sampled ids, cache counts 0). Streamed, the
  events come in Anthropic's order (`messages_events`).
- Errors: `{"type": "error", "error": {"type", "message"}}` with Anthropic's types
  (`invalid_request_error`, `authentication_error`, `not_found_error`, `request_too_large`,
  `rate_limit_error`, `api_error`), for every refusal on these paths, the key check and the
  body cap included (`AnthropicErrors`).

Accepted as no-ops: `thinking` (no hidden reasoning is sampled), `cache_control` (on any
block; no prompt cache), `metadata` (but `user_id`), `service_tier`, `context_management`,
`output_config`, `container`, `mcp_servers`, `speed`, `inference_geo`, `diagnostics`,
`user_profile_id`, `workspace_id`, `disable_parallel_tool_use` with `auto` (a reply may
hold several calls), `defer_loading` on tools, and the `anthropic-beta` /
`anthropic-version` headers.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.engine.constraints import Constraint, ToolFunction
from skyrl_sdk.agents.serving.generation import until_disconnect
from skyrl_sdk.agents.serving.messages_events import message_events
from skyrl_sdk.agents.serving.messages_protocol import (
    ChatTool,
    CountTokensRequest,
    MessageBody,
    MessagesRequest,
    chat_messages,
    content_blocks,
    error_body,
    error_kind,
    message_body,
    stop_of,
    thread_of,
)
from skyrl_sdk.agents.serving.prompts import chat_prompt, normalize_messages
from skyrl_sdk.agents.serving.protocol import ApiError, parse_body
from skyrl_sdk.agents.serving.sse import EventStreamResponse, json_response
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import start_stream
from skyrl_sdk.agents.serving.structured import (
    FORCED_FORMAT,
    SYNTAX,
    constrain,
    tool_choice_constraint,
)
from skyrl_sdk.http_guard import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from fastapi import FastAPI

PATHS = re.compile(r"(/sessions/[^/]+)?/v1/messages(/count_tokens)?/?")
"""The paths whose errors `AnthropicErrors` answers in Anthropic's shape (before
`SessionGate` strips a session prefix)."""


def add_routes(app: FastAPI, server: Server) -> None:
    """Add this API's routes to `app`, answered by `server`, and the middleware that gives
    their errors Anthropic's shape."""
    app.add_middleware(AnthropicErrors)

    @app.post("/v1/messages")
    async def messages(request: Request) -> Any:
        req = parse_body(await request.body(), MessagesRequest)
        plan = server.admit(plan_messages(server, request, req))
        message_id = f"msg_{uuid.uuid4().hex[:24]}"
        if not req.stream:
            async with server.settling(plan):
                answer = await message_response(server, request, plan, message_id)
                return json_response(dict(answer))
        async with server.settling(plan, streamed=True):
            first = await until_disconnect(request.receive, start_stream(server, plan))
        events = message_events(server, plan, first, message_id)
        return EventStreamResponse(server.settled(plan, events))

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Any:
        req = parse_body(await request.body(), CountTokensRequest)
        server.check_model(req.model)
        if server.renderer is None:
            raise ApiError(400, "this server's policy has no tokenizer to count tokens with")
        session = server.session_of(request, _user(req))
        prompt, _ = _render(server, session, req, offered_tools(req))
        return json_response({"input_tokens": len(prompt)})


def _user(req: CountTokensRequest) -> str | None:
    return req.metadata.user_id if req.metadata is not None else None


def offered_tools(req: CountTokensRequest) -> list[ChatTool] | None:
    """The tools to render, after `tool_choice` (None: none); a choice of `any` or a named
    tool needs tools, and the named one must be among them."""
    choice = req.tool_choice
    if choice is not None and choice.type in ("any", "tool"):
        if not req.tools:
            raise ApiError(400, f"tool_choice {choice.type!r} needs tools", param="tool_choice")
        if choice.type == "tool" and choice.name not in {t.name for t in req.tools}:
            raise ApiError(
                400,
                f"tool_choice names {choice.name!r}, which is not in tools",
                param="tool_choice",
            )
    if not req.tools or (choice is not None and choice.type == "none"):
        return None
    return [t.chat_tool() for t in req.tools]


def forced_tools(server: Server, req: MessagesRequest) -> Constraint | None:
    """`tool_choice` `any` (one or more calls, one with `disable_parallel_tool_use`) or a named
    `tool` (one call of it) as a tool-call grammar (`structured`); None for `auto` / `none`."""
    choice = req.tool_choice
    if choice is None or choice.type in ("auto", "none") or not req.tools:
        return None
    functions = [ToolFunction(t.name, t.input_schema) for t in req.tools]
    return tool_choice_constraint(
        functions,
        "required" if choice.type == "any" else choice.name,
        server.config.tool_format,
        parallel=not choice.disable_parallel_tool_use,
    )


def _render(
    server: Server, session: str, req: CountTokensRequest, tools: list[ChatTool] | None
) -> tuple[tuple[int, ...], list[dict[str, Any]]]:
    """The request's prompt ids (known replies as their sampled ids) and chat messages."""
    messages = normalize_messages([dict(m) for m in chat_messages(req)])
    if server.renderer is None:
        return (), messages
    rendered = chat_prompt(
        server.renderer,
        messages,
        [dict(t) for t in tools] if tools else None,
        server.store.replies(session),
        server.context_limit,
    )
    return rendered.token_ids, messages


_PARAM_NAMES = {"prompt": "messages", "stop": "stop_sequences"}
"""The Messages API's names of the fields `Server.sampling`'s errors name."""


def plan_messages(server: Server, request: Request, req: MessagesRequest) -> Plan:
    """A Messages request validated and rendered as the chat route renders a chat request."""
    server.check_model(req.model)
    session = server.session_of(request, _user(req))
    tools = offered_tools(req)
    prompt, messages = _render(server, session, req, tools)
    stop_ids: Sequence[int] = server.renderer.stop_token_ids if server.renderer else ()
    limit = server.context_limit
    if limit is not None and prompt and limit - len(prompt) < req.max_tokens:
        # Anthropic clients ask for a generous maximum (Claude Code: 32,000): the reply may
        # run to the end of the context, as on Anthropic's API.
        req = req.model_copy(update={"max_tokens": max(1, limit - len(prompt))})
    sampling = server.sampling(
        req,  # type: ignore[arg-type]  (the fields Server.sampling reads)
        len(prompt),
        stop_token_ids=stop_ids,
        top_logprobs=0,
        limit_param="max_tokens",
        param_names=_PARAM_NAMES,
    )
    forced = forced_tools(server, req)
    tokenizer = server.renderer.tokenizer if server.renderer is not None else None
    sampling = constrain(server.policy, tokenizer, sampling, forced, param="tool_choice")
    tool_format = server.config.tool_format if tools else None
    if forced is not None:  # parsed in the syntax the grammar wrote
        tool_format = FORCED_FORMAT[SYNTAX[server.config.tool_format]]
    return Plan(
        session=session,
        prompt=prompt,
        messages=tuple(messages),
        sampling=sampling,
        n=1,
        stops=req.stops(),
        tool_format=tool_format,
        auxiliary=server.store.is_auxiliary(session, thread_of(req)),
    )


async def message_response(
    server: Server, request: Request, plan: Plan, message_id: str
) -> MessageBody:
    """The non-streamed answer: the `message` object."""
    (r,), llm_s = await until_disconnect(request.receive, server.generate(plan))
    await server.capture(plan, 0, r, llm_s)
    return message_body(
        message_id,
        server.config.model_name,
        content_blocks(r),
        stop_of(r, plan.stops),
        (len(plan.prompt), len(r.completion.token_ids)),
    )


class AnthropicErrors:
    """ASGI middleware, outermost: an error answered on a Messages path, by whichever layer
    (the key check, the body cap, a route), leaves in Anthropic's shape,
    `{"type": "error", "error": {"type", "message"}}`; the field an OpenAI-shaped body names
    is kept in the message. Other paths and successful answers pass untouched."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not PATHS.fullmatch(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def reshape(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = _reshaped(start["status"], b"".join(chunks))
            headers = [
                (k, v)
                for k, v in start.get("headers", ())
                if k.lower() not in (b"content-length", b"content-type")
            ]
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, reshape)


def _reshaped(status: int, raw: bytes) -> bytes:
    """An error body in Anthropic's shape (an OpenAI-shaped one's message and field kept)."""
    try:
        data = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        data = {}
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(data, dict) and data.get("type") == "error":
        return raw  # already Anthropic's
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        param = error.get("param")
        if param and str(param) not in message:
            message = f"{param}: {message}"
    elif isinstance(data, dict) and "detail" in data:
        message = str(data["detail"])
    else:
        message = f"request failed with status {status}"
    body = error_body(status, message or error_kind(status))
    return json.dumps(body, ensure_ascii=False).encode()
