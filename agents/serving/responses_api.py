"""`POST /v1/responses` (the OpenAI Responses API): plan, answer (plain or streamed), capture.

Routes are added by `add_routes`, which `create_app` calls for every app; like every `/v1`
path it also answers under `/sessions/{id}/v1/responses`, behind the same keys (`auth`), body
cap, header deadline, session token budget, queue cap and fair share as chat completions
(`Server.admit`, `Server.sampling`).

A Responses turn is a chat turn: its items are folded into chat messages
(`responses_protocol.input_messages`), rendered by the same `prompts.chat_prompt` (the
server's earlier replies spliced in as their sampled ids), sampled by the same
`Server.generate` / `streaming.start_stream`, parsed by the same `generation.reply` and
captured by the same `Server.capture`. So a harness's whole tool-using conversation, sent
back as items or continued by `previous_response_id`, is one segment of sampled ids; a chat
client and a Responses client of one session share it.

Honoured:

- `input` (a string, or items: `message` with `input_text` / `output_text` / `refusal` parts
  and roles `system`, `developer` (as system), `user`, `assistant`; `function_call`,
  `function_call_output`, `custom_tool_call`, `custom_tool_call_output`; `reasoning` items
  are accepted and dropped: no hidden reasoning is sampled here); `instructions` (a system
  message first; not carried over by `previous_response_id`, as OpenAI does).
- `tools`: `function` tools; `custom` (freeform) tools with `format` `text` (rendered as a
  function with one string argument `input`, answered as `custom_tool_call` items); Codex's
  `namespace` tools (their functions offered by name, calls carry `namespace`). Hosted kinds
  (`web_search`, `file_search`, `code_interpreter`, `computer_use_preview`,
  `image_generation`, `local_shell`, `mcp`, `tool_search`) are accepted and not offered: the
  server runs no tools. A custom tool with a grammar `format` is a 400 naming
  `tools.N.format` (not enforced).
- `tool_choice`: `auto`; `none` (tools neither rendered nor parsed); `allowed_tools` in mode
  `auto` (only those tools offered). `required`, a named tool and `allowed_tools` in mode
  `required` need constrained decoding: 400 naming `tool_choice` (never silently ignored);
  a named tool that is not in `tools` is a 400 too, as in chat.
- `previous_response_id`: the server keeps each answered response's items (input and output)
  for `MAX_STORED_RESPONSES` responses, least recently used evicted first, whatever `store`
  says; a response of another session, or one evicted, is a 404 naming the field.
- `max_output_tokens` (bounded by the context, 400 `context_length_exceeded`; a reply cut by
  it is `status: incomplete`, `incomplete_details.reason: max_output_tokens`),
  `temperature`, `top_p`, `stream`, `user` (the session when the URL names none); extensions
  as in chat: `top_k`, `seed`, `stop` (at most 4 strings, cut from the text).
- `usage`: `input_tokens` (prompt ids), `output_tokens` (sampled ids), `total_tokens`.
- `text.format` `text`; a `json_schema` / `json_object` format is a 400 naming `text.format`.

Accepted as no-ops: `reasoning` (effort, summary), `store`, `parallel_tool_calls` (a reply may
always hold several calls), `metadata`, `text.verbosity`, `include` (encrypted reasoning,
logprobs), `truncation`, `prompt_cache_key`, `safety_identifier`, `service_tier`,
`client_metadata`, `background` (answered in the foreground), `top_logprobs`,
`max_tool_calls`, `prompt`, `conversation`, `stream_options`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.serving.generation import Reply, until_disconnect
from skyrl_sdk.agents.serving.prompts import chat_prompt
from skyrl_sdk.agents.serving.protocol import ApiError, parse_body
from skyrl_sdk.agents.serving.responses_events import response_events
from skyrl_sdk.agents.serving.responses_protocol import (
    OutputItem,
    ResponseHead,
    ResponseObject,
    ResponsesRequest,
    ToolSet,
    input_messages,
    new_id,
    output_items,
    response_usage,
    tool_set,
)
from skyrl_sdk.agents.serving.sse import EventStreamResponse, json_response
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import start_stream

if TYPE_CHECKING:
    from fastapi import FastAPI

MAX_STORED_RESPONSES = 4096
"""Responses whose items are kept for `previous_response_id` (least recently used evicted)."""

Items = tuple[Mapping[str, Any], ...]
"""A conversation's items, in order."""


class ResponseLog:
    """Each answered response's items, for `previous_response_id`: at most `capacity`,
    least recently used evicted first. A continued response's items share the earlier ones'
    objects, so a long chain costs references, not copies."""

    def __init__(self, capacity: int = MAX_STORED_RESPONSES):
        self.capacity = capacity
        """Most responses kept."""
        self._items: OrderedDict[str, tuple[str, Items]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response_id: str, session: str, items: Sequence[Mapping[str, Any]]) -> None:
        """Keep a response's whole conversation (its input and output items)."""
        with self._lock:
            self._items[response_id] = (session, tuple(items))
            self._items.move_to_end(response_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, response_id: str, session: str) -> Items:
        """The items of `response_id`, answered in `session`; else 404 naming the field."""
        with self._lock:
            found = self._items.get(response_id)
            if found is not None and found[0] == session:
                self._items.move_to_end(response_id)
                return found[1]
        raise ApiError(
            404,
            f"no response {response_id!r} in this session (unknown, or no longer kept: the "
            f"server keeps the last {self.capacity})",
            param="previous_response_id",
            code="previous_response_not_found",
        )


@dataclass(frozen=True)
class ResponsePlan:
    """A Responses request, validated and rendered."""

    plan: Plan
    """What to generate, as for a chat request."""
    tools: ToolSet
    """The tools offered (how to answer their calls)."""
    items: Items
    """The whole conversation so far (a previous response's items, then `input`)."""
    head: ResponseHead
    """The response's id and echoed fields."""


def offered_tools(req: ResponsesRequest, tools: ToolSet) -> ToolSet | None:
    """The tools to render, after `tool_choice` (None: `none`). Choices that need the model's
    output constrained are refused, naming `tool_choice`, rather than ignored."""
    choice = req.tool_choice
    if choice is None or choice == "auto":
        return tools
    if choice == "none":
        return None
    if not tools.chat_tools:
        raise ApiError(400, "tool_choice is only allowed when tools are given", param="tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = {t.get("name") for t in choice.get("tools") or () if isinstance(t, dict)}
        if not allowed or not allowed <= tools.names:
            raise ApiError(400, "tool_choice.tools must name given tools", param="tool_choice")
        if choice.get("mode", "auto") == "auto":
            kept = tuple(t for t in tools.chat_tools if t["function"]["name"] in allowed)
            return ToolSet(kept, tools.custom, tools.namespaces)
    elif isinstance(choice, dict):
        name = choice.get("name")
        if choice.get("type") in ("function", "custom") and name not in tools.names:
            raise ApiError(
                400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
            )
    elif choice != "required":
        raise ApiError(
            400, "tool_choice must be 'none', 'auto', 'required' or a tool", param="tool_choice"
        )
    raise ApiError(
        400,
        f"tool_choice {choice!r} cannot be enforced by this server (it needs constrained "
        "decoding); use 'auto'",
        param="tool_choice",
    )


def _check_text_format(req: ResponsesRequest) -> None:
    fmt = (req.text or {}).get("format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise ApiError(
            400,
            "text.format: structured output cannot be enforced by this server; use 'text'",
            param="text.format",
        )


def plan_response(
    server: Server, request: Request, req: ResponsesRequest, log: ResponseLog
) -> ResponsePlan:
    """A Responses request validated and rendered like a chat request."""
    server.check_model(req.model)
    session = server.session_of(request, req.user)
    history = log.get(req.previous_response_id, session) if req.previous_response_id else ()
    items = (*history, *req.items())
    messages = input_messages(req.instructions, items)
    tools = tool_set(req.tools)
    offered = offered_tools(req, tools)
    _check_text_format(req)
    chat_tools = list(offered.chat_tools) if offered is not None else []
    prompt: tuple[int, ...] = ()
    stop_ids: Sequence[int] = ()
    if server.renderer is not None:
        rendered = chat_prompt(
            server.renderer,
            messages,
            chat_tools or None,
            server.store.replies(session),
            server.context_limit,
        )
        prompt, stop_ids = rendered.token_ids, server.renderer.stop_token_ids
    try:
        sampling = server.sampling(
            req,  # type: ignore[arg-type]  (the fields Server.sampling reads)
            len(prompt),
            stop_token_ids=stop_ids,
            top_logprobs=0,
            limit_param="max_output_tokens",
        )
    except ApiError as e:
        if e.param in ("prompt", "messages"):
            e.param = "input"
        raise
    plan = Plan(
        session=session,
        prompt=prompt,
        messages=tuple(messages),
        sampling=sampling,
        n=1,
        stops=req.stops(),
        tool_format=server.config.tool_format if chat_tools else None,
    )
    head = ResponseHead(new_id("resp"), server.config.model_name, req)
    return ResponsePlan(plan, offered or ToolSet(), items, head)


async def _answer(
    server: Server, request: Request, rp: ResponsePlan, log: ResponseLog
) -> ResponseObject:
    """The non-streamed answer."""
    (r,), llm_s = await until_disconnect(request.receive, server.generate(rp.plan))
    await server.capture(rp.plan, 0, r, llm_s)
    items = output_items(r, rp.tools)
    log.put(rp.head.id, rp.plan.session, (*rp.items, *items))
    status = "incomplete" if r.finish_reason == "length" else "completed"
    usage = response_usage(len(rp.plan.prompt), len(r.completion.token_ids))
    return rp.head.body(status, items, usage)


def add_routes(app: FastAPI, server: Server) -> None:
    """Add this API's routes to `app`, answered by `server`."""
    log = ResponseLog(MAX_STORED_RESPONSES)
    app.state.responses = log

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        req = parse_body(await request.body(), ResponsesRequest)
        rp = plan_response(server, request, req, log)
        plan = server.admit(rp.plan)
        rp = ResponsePlan(plan, rp.tools, rp.items, rp.head)
        if not req.stream:
            async with server.settling(plan):
                return json_response(await _answer(server, request, rp, log))

        async def finish(r: Reply, items: list[OutputItem]) -> None:
            await server.capture(plan, 0, r, first.elapsed())
            log.put(rp.head.id, plan.session, (*rp.items, *items))

        async with server.settling(plan, streamed=True):
            first = await until_disconnect(request.receive, start_stream(server, plan))
        events = response_events(server, plan, rp.head, rp.tools, first, finish)
        return EventStreamResponse(server.settled(plan, events))
