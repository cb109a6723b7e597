"""A Responses request's `tool_choice` and `text.format`: what is offered, what is enforced.

`auto` offers every tool; `none` offers none (not rendered, not parsed); `allowed_tools` in
mode `auto` offers only those. `required`, a named tool (`{"type": "function" | "custom",
"name"}`) and `allowed_tools` in mode `required` force a call, and a `json_schema` /
`json_object` `text.format` forces the reply's shape: both are enforced by constrained
decoding through `structured` (the chat route's `tool_choice_constraint`,
`response_format_constraint` and `constrain`), so they hold for every reply of a policy with
`supports_constraints`; any other policy, or a tree without constrained decoding, gets a 400
naming the field, never a silently ignored choice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from skyrl_sdk.agents.serving.protocol import ApiError
from skyrl_sdk.agents.serving.responses_protocol import ResponsesRequest, ToolSet
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat

if TYPE_CHECKING:
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.serving.state import Server


@dataclass(frozen=True)
class ToolChoice:
    """What a request's `tool_choice` offers and forces."""

    offered: ToolSet | None
    """The tools rendered and parsed (None: `none`)."""
    forced: str | None = None
    """`required` (any offered tool) or the one tool's name; None: nothing forced."""


def tool_choice(req: ResponsesRequest, tools: ToolSet) -> ToolChoice:
    """`req.tool_choice` validated against `tools` (400 naming `tool_choice`)."""
    choice = req.tool_choice
    if choice is None or choice == "auto":
        return ToolChoice(tools)
    if choice == "none":
        return ToolChoice(None)
    if not tools.chat_tools:
        raise ApiError(400, "tool_choice is only allowed when tools are given", param="tool_choice")
    if choice == "required":
        return ToolChoice(tools, "required")
    if not isinstance(choice, dict):
        raise ApiError(
            400, "tool_choice must be 'none', 'auto', 'required' or a tool", param="tool_choice"
        )
    kind = choice.get("type")
    if kind == "allowed_tools":
        allowed = {t.get("name") for t in choice.get("tools") or () if isinstance(t, dict)}
        if not allowed or not allowed <= tools.names:
            raise ApiError(400, "tool_choice.tools must name given tools", param="tool_choice")
        kept = tuple(t for t in tools.chat_tools if t["function"]["name"] in allowed)
        mode = choice.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise ApiError(400, "tool_choice.mode must be auto or required", param="tool_choice")
        return ToolChoice(
            replace(tools, chat_tools=kept), "required" if mode == "required" else None
        )
    if kind in ("function", "custom"):
        name = choice.get("name")
        if name not in tools.names:
            raise ApiError(
                400, f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
            )
        return ToolChoice(tools, str(name))
    raise ApiError(400, f"tool_choice type {kind!r} cannot be enforced here", param="tool_choice")


def _text_format(req: ResponsesRequest) -> dict[str, object] | None:
    """`text.format` in chat's `response_format` shape (None: text)."""
    fmt = (req.text or {}).get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"schema": fmt.get("schema")}}
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    raise ApiError(400, "text.format must be text, json_schema or json_object", param="text.format")


def enforce(
    server: Server, req: ResponsesRequest, choice: ToolChoice, sampling: SamplingParams
) -> tuple[SamplingParams, ToolOutputFormat | None]:
    """`sampling` with the constraint a forcing `tool_choice`, a grammar-typed custom tool or
    a JSON `text.format` needs, and how a constrained reply's calls are parsed (None: as the
    server's tool format says). A grammar tool offered under `auto` gets a lazy tool-call
    grammar: the reply is free until it opens a call, which must then be a valid call, a
    grammar tool's input a sentence of its grammar."""
    fmt = _text_format(req)
    offered = choice.offered
    grammars = {n: g for n, g in offered.grammars.items() if n in offered.names} if offered else {}
    if fmt is None and choice.forced is None and not grammars:
        return sampling, None
    if choice.forced is not None:
        param = "tool_choice"
    elif fmt is not None:
        param = "text.format"
    else:
        param = next(iter(grammars.values()))[1]
    if fmt is not None and (choice.forced is not None or grammars):
        raise ApiError(
            400,
            "text.format cannot be enforced together with a forced tool_choice or a "
            "grammar-typed custom tool (one grammar per reply)",
            param="text.format",
        )
    try:
        from skyrl_sdk.agents.engine.constraints import Constraint, ConstraintError, ToolFunction
        from skyrl_sdk.agents.serving import structured
    except ImportError:  # a tree without constrained decoding
        raise ApiError(400, f"{param} cannot be enforced by this server", param=param) from None
    renderer = server.renderer
    tokenizer = renderer.tokenizer if renderer is not None else None
    if fmt is not None:
        constraint = structured.response_format_constraint(fmt, param="text.format")
        return structured.constrain(
            server.policy, tokenizer, sampling, constraint, param=param
        ), None
    assert choice.offered is not None
    functions = [
        ToolFunction(
            t["function"]["name"],
            t["function"].get("parameters"),
            grammars.get(t["function"]["name"], (None, ""))[0],
        )
        for t in choice.offered.chat_tools
    ]
    syntax = structured.SYNTAX[server.config.tool_format]
    parallel = getattr(req, "parallel_tool_calls", None) is not False
    try:
        if choice.forced is None:
            constraint = Constraint.tool_calls(functions, syntax=syntax, optional=True)
        else:
            constraint = structured.tool_choice_constraint(
                functions, choice.forced, server.config.tool_format, parallel=parallel
            )
    except ConstraintError as e:  # a grammar that cannot be written inside a tool call
        raise ApiError(400, f"{param} cannot be enforced: {e}", param=param) from None
    sampling = structured.constrain(server.policy, tokenizer, sampling, constraint, param=param)
    return sampling, structured.FORCED_FORMAT[syntax]
