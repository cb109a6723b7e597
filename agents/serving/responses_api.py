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
client and a Responses client of one session share it. A side conversation (another
`prompt_cache_key`, else another system text: a sub-agent, a title request) is captured in
segments of its own marked `auxiliary`, left out of training by default (`thread_of`).

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
  server runs no tools. A custom tool with a `grammar` `format` (syntax `lark`, as Codex
  sends `apply_patch` for models it has metadata for, or `regex`) is enforced by constrained
  decoding: its input is produced under the grammar, written JSON-escaped inside the call
  (`engine.lark_json`); under `auto` the reply is free text until it opens a call (a lazy
  grammar), forced as any named tool. A policy without constrained decoding, another
  syntax, or a grammar that cannot be escaped (case-insensitive literals, anchors, special
  tokens, recursion) is a 400 naming `tools.N.format`.
- `tool_choice`: `auto`; `none` (tools neither rendered nor parsed); `allowed_tools` (only
  those offered); `required`, a named function or custom tool, and `allowed_tools` in mode
  `required` are enforced by constrained decoding (`responses_choice`, through the chat
  route's `structured`): on a policy that cannot enforce them, a 400 naming `tool_choice`,
  never silently ignored. A named tool that is not in `tools` is a 400 too, as in chat.
- `previous_response_id` and `store`: the server keeps each answered response's items (input
  and output) unless the request said `store: false` (Codex does, and sends the whole
  conversation each turn), for `ServeConfig.max_stored_responses` responses
  (`--max-stored-responses`, default 4096), least recently used evicted first; a response
  of another session, not stored, deleted or evicted is a 404 naming the field.
- `GET /v1/responses/{id}` (the stored response object, streamed or not) and
  `DELETE /v1/responses/{id}` (forgets it), per session like every path: another session's
  response, or one not kept, is a 404 `not_found`.
- `max_output_tokens` (bounded by the context, 400 `context_length_exceeded`; a reply cut by
  it is `status: incomplete`, `incomplete_details.reason: max_output_tokens`),
  `temperature`, `top_p`, `stream`, `user` (the session when the URL names none); extensions
  as in chat: `top_k`, `seed`, `stop` (at most 4 strings, cut from the text).
- `usage`: `input_tokens` (prompt ids), `output_tokens` (sampled ids), `total_tokens`.
- `text.format`: `text`; `json_schema` (its `schema`) and `json_object` enforced by constrained
  decoding like chat's `response_format` (else a 400 naming `text.format`).

Accepted as no-ops: `reasoning` (effort, summary), `parallel_tool_calls` under
`auto` (a reply may always hold several calls; with a forced choice `false` allows one),
`metadata` (echoed), `text.verbosity`, `include` (encrypted reasoning, logprobs),
`truncation`, `prompt_cache_key`, `safety_identifier`, `service_tier`, `client_metadata`,
`background` (answered in the foreground), `top_logprobs`, `max_tool_calls`,
`stream_options`. Refused with a 400 naming the field, since ignoring them would change the
conversation: `conversation` and `prompt` (server-side conversations and prompt templates).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.serving.config import DEFAULT_MAX_STORED_RESPONSES
from skyrl_sdk.agents.serving.generation import Reply, until_disconnect
from skyrl_sdk.agents.serving.prompts import chat_prompt
from skyrl_sdk.agents.serving.protocol import ApiError, parse_body
from skyrl_sdk.agents.serving.responses_choice import enforce, tool_choice
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
    thread_of,
    tool_set,
)
from skyrl_sdk.agents.serving.sse import EventStreamResponse, json_response
from skyrl_sdk.agents.serving.state import Plan, Server
from skyrl_sdk.agents.serving.streaming import start_stream

if TYPE_CHECKING:
    from fastapi import FastAPI

MAX_STORED_RESPONSES = DEFAULT_MAX_STORED_RESPONSES
"""Responses kept by default (`ServeConfig.max_stored_responses`, `--max-stored-responses`)."""

Items = tuple[Mapping[str, Any], ...]
"""A conversation's items, in order."""


class ResponseLog:
    """Each answered response's items (for `previous_response_id`) and its response object
    (for `GET /v1/responses/{id}`): at most `capacity`, least recently used evicted first. A
    continued response's items share the earlier ones' objects, so a long chain costs
    references, not copies."""

    def __init__(self, capacity: int = MAX_STORED_RESPONSES):
        self.capacity = capacity
        """Most responses kept."""
        self._items: OrderedDict[str, tuple[str, Items, ResponseObject | None]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def put(
        self,
        response_id: str,
        session: str,
        items: Sequence[Mapping[str, Any]],
        body: ResponseObject | None = None,
    ) -> None:
        """Keep a response's whole conversation (its input and output items) and its body."""
        with self._lock:
            self._items[response_id] = (session, tuple(items), body)
            self._items.move_to_end(response_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def _find(self, response_id: str, session: str, param: str | None, code: str) -> Any:
        with self._lock:
            found = self._items.get(response_id)
            if found is not None and found[0] == session:
                self._items.move_to_end(response_id)
                return found
        raise ApiError(
            404,
            f"no response {response_id!r} in this session (unknown, answered with store: "
            f"false, deleted, or no longer kept: the server keeps the last {self.capacity})",
            param=param,
            code=code,
        )

    def get(self, response_id: str, session: str) -> Items:
        """The items of `response_id`, answered in `session`; else 404 naming the field."""
        return self._find(
            response_id, session, "previous_response_id", "previous_response_not_found"
        )[1]

    def response(self, response_id: str, session: str) -> ResponseObject:
        """The response object of `response_id` in `session` (404 `not_found` otherwise)."""
        body = self._find(response_id, session, None, "not_found")[2]
        if body is None:
            raise ApiError(404, f"response {response_id!r} has no stored body", code="not_found")
        return body

    def delete(self, response_id: str, session: str) -> None:
        """Forget `response_id` (404 `not_found` when it is not kept for `session`)."""
        self._find(response_id, session, None, "not_found")
        with self._lock:
            self._items.pop(response_id, None)


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
    stored: bool = True
    """Whether its items are kept for `previous_response_id` (not with `store: false`)."""


def plan_response(
    server: Server, request: Request, req: ResponsesRequest, log: ResponseLog
) -> ResponsePlan:
    """A Responses request validated and rendered like a chat request."""
    server.check_model(req.model)
    for field in ("conversation", "prompt"):
        if getattr(req, field, None) is not None:
            raise ApiError(400, f"{field} is not supported by this server", param=field)
    session = server.session_of(request, req.user)
    history = log.get(req.previous_response_id, session) if req.previous_response_id else ()
    items = (*history, *req.items())
    messages = input_messages(req.instructions, items)
    choice = tool_choice(req, tool_set(req.tools))
    offered = choice.offered
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
    sampling = server.sampling(
        req,  # type: ignore[arg-type]  (the fields Server.sampling reads)
        len(prompt),
        stop_token_ids=stop_ids,
        top_logprobs=0,
        limit_param="max_output_tokens",
        param_names={"prompt": "input", "messages": "input"},
    )
    sampling, forced_format = enforce(server, req, choice, sampling)
    plan = Plan(
        session=session,
        prompt=prompt,
        messages=tuple(messages),
        sampling=sampling,
        n=1,
        stops=req.stops(),
        tool_format=forced_format or (server.config.tool_format if chat_tools else None),
        auxiliary=server.store.is_auxiliary(session, thread_of(req, messages)),
    )
    head = ResponseHead(new_id("resp"), server.config.model_name, req)
    stored = getattr(req, "store", None) is not False
    return ResponsePlan(plan, offered or ToolSet(), items, head, stored)


async def _answer(
    server: Server, request: Request, rp: ResponsePlan, log: ResponseLog
) -> ResponseObject:
    """The non-streamed answer."""
    (r,), llm_s = await until_disconnect(request.receive, server.generate(rp.plan))
    await server.capture(rp.plan, 0, r, llm_s)
    items = output_items(r, rp.tools)
    body = _final_body(rp, r, items)
    if rp.stored:
        log.put(rp.head.id, rp.plan.session, (*rp.items, *items), body)
    return body


def _final_body(rp: ResponsePlan, r: Reply, items: Sequence[OutputItem]) -> ResponseObject:
    """The finished response object (`completed`, or `incomplete` when cut by the limit)."""
    status = "incomplete" if r.finish_reason == "length" else "completed"
    usage = response_usage(len(rp.plan.prompt), len(r.completion.token_ids))
    return rp.head.body(status, items, usage)


def add_routes(app: FastAPI, server: Server) -> None:
    """Add this API's routes to `app`, answered by `server`."""
    log = ResponseLog(server.config.max_stored_responses)
    app.state.responses = log

    @app.get("/v1/responses/{response_id}")
    async def get_response(request: Request, response_id: str) -> Any:
        """A stored response of this session (not with `store: false`; 404 otherwise)."""
        return json_response(log.response(response_id, server.session_of(request, None)))

    @app.delete("/v1/responses/{response_id}")
    async def delete_response(request: Request, response_id: str) -> Any:
        """Forget a stored response: `previous_response_id` and GET then answer 404."""
        log.delete(response_id, server.session_of(request, None))
        return json_response({"id": response_id, "object": "response", "deleted": True})

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        req = parse_body(await request.body(), ResponsesRequest)
        rp = plan_response(server, request, req, log)
        plan = server.admit(rp.plan)
        rp = replace(rp, plan=plan)
        if not req.stream:
            async with server.settling(plan):
                return json_response(await _answer(server, request, rp, log))

        async def finish(r: Reply, items: list[OutputItem]) -> None:
            await server.capture(plan, 0, r, first.elapsed())
            if rp.stored:
                body = _final_body(replace(rp, plan=plan), r, items)
                log.put(rp.head.id, plan.session, (*rp.items, *items), body)

        async with server.settling(plan, streamed=True):
            first = await until_disconnect(request.receive, start_stream(server, plan))
        events = response_events(server, plan, rp.head, rp.tools, first, finish)
        return EventStreamResponse(server.settled(plan, events))
