"""The Responses API's wire format: the request, its input items as chat messages, its tools
as chat-template tools, and the output items and response object the server answers with.

The chat path renders, samples and captures; this module only translates. A Responses
conversation is a list of items (messages, `function_call`, `function_call_output`,
`custom_tool_call`, `custom_tool_call_output`, `reasoning`); `input_messages` folds them into
the chat messages `prompts.chat_prompt` renders: consecutive assistant items (a message and the
calls that followed it) become one assistant message with `tool_calls`, exactly the shape the
server's own replies are remembered under (`prompts.reply_key`), so a reply a client sends
back as items is spliced in as its sampled ids, as in a chat conversation.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator

from skyrl_sdk.agents.serving.generation import Reply
from skyrl_sdk.agents.serving.protocol import MAX_SEED, ApiError, check_stop, stop_tuple

CUSTOM_INPUT = "input"
"""The one string argument a custom (freeform) tool is rendered with: the model writes
`{"name": tool, "arguments": {"input": "..."}}` and the client gets `custom_tool_call.input`."""

HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer_use_preview",
        "image_generation",
        "local_shell",
        "mcp",
        "tool_search",
    }
)
"""OpenAI-hosted tool kinds: accepted and not offered (this server runs no tools)."""


InputItem = Mapping[str, Any]
"""One item of a request's `input`, as the client sent it (validated by `input_messages`)."""


class ChatMessage(TypedDict, total=False):
    """A normalized chat message, as `prompts.normalize_messages` makes them."""

    role: str
    """`system`, `user`, `assistant` or `tool`."""
    content: str
    """Its text."""
    tool_calls: list[dict[str, Any]]
    """An assistant message's calls (chat shape, arguments as an object)."""
    tool_call_id: str
    """A tool message's call."""
    name: str
    """A tool message's tool."""


class OutputText(TypedDict):
    """An `output_text` content part."""

    type: str
    """`output_text`."""
    text: str
    """The text."""
    annotations: list[object]
    """Always empty."""
    logprobs: list[object]
    """Always empty (`include` of logprobs is a no-op)."""


class OutputItem(TypedDict, total=False):
    """One output item: a `message`, `function_call` or `custom_tool_call`."""

    id: str
    """`msg_...`, `fc_...`, `ctc_...`."""
    type: str
    """The item's kind."""
    status: str
    """`in_progress` (streamed, when added) or `completed`."""
    role: str
    """A message's role: `assistant`."""
    content: list[OutputText]
    """A message's parts."""
    call_id: str
    """A call's id (the client's output names it)."""
    name: str
    """A call's tool."""
    arguments: str
    """A function call's arguments, as JSON."""
    input: str
    """A custom tool call's input."""
    namespace: str
    """A namespaced tool's namespace."""


class Usage(TypedDict):
    """The Responses API's `usage`."""

    input_tokens: int
    """Prompt ids."""
    input_tokens_details: dict[str, int]
    """`cached_tokens`: 0."""
    output_tokens: int
    """Sampled ids."""
    output_tokens_details: dict[str, int]
    """`reasoning_tokens`: 0."""
    total_tokens: int
    """Both."""


class ResponsesRequest(BaseModel):
    """`POST /v1/responses`. Unknown fields are accepted and ignored (see `responses_api`)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    """The served model's name."""
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    """A user text, or the conversation's items."""
    instructions: str | None = None
    """A system message put before the items (not carried over by `previous_response_id`)."""
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=256)
    """Continue after this response: its input and output items come before `input`."""
    tools: list[dict[str, Any]] | None = None
    """Function, custom (freeform) and namespace tools; hosted kinds are not offered."""
    tool_choice: str | dict[str, Any] | None = None
    """`auto`, `none`, or one that needs enforcing (`required`, a named tool, `allowed_tools`)."""
    max_output_tokens: int | None = Field(default=None, ge=1)
    """Most tokens to generate (default: whatever the context leaves)."""
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    """Softmax temperature; 0 is greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus mass."""
    top_k: int = Field(default=0, ge=0)
    """vLLM extension: keep the k most likely tokens (0: off)."""
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    """Extension: sampler seed (same request, same tokens)."""
    stop: str | list[str] | None = None
    """Extension (as chat's): up to 4 stop strings, cut from the text."""
    stream: bool = False
    """Answer as server-sent events."""
    user: str | None = Field(default=None, max_length=256)
    """The caller's end-user id; groups captured turns into a session, as in chat."""
    text: dict[str, Any] | None = None
    """`text.format` (`text` only; a schema is refused) and `text.verbosity` (a no-op)."""

    @field_validator("temperature", "top_p", "top_k", mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        # Harness SDKs send an unset sampling field as null.
        if value is None:
            return cls.model_fields[info.field_name].default
        return value

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_stop(value)

    def stops(self) -> tuple[str, ...]:
        """`stop` as a tuple."""
        return stop_tuple(self.stop)

    def token_limit(self) -> int | None:
        """`max_output_tokens`."""
        return self.max_output_tokens

    def items(self) -> list[InputItem]:
        """`input` as items (a text is one user message)."""
        if isinstance(self.input, str):
            return [{"type": "message", "role": "user", "content": self.input}]
        return list(self.input)


# -- tools ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSet:
    """A request's tools as the chat template sees them, and how to answer each call."""

    chat_tools: tuple[dict[str, Any], ...] = ()
    """Chat-completions-shaped function tools, rendered by the chat template."""
    custom: frozenset[str] = frozenset()
    """Names of custom (freeform) tools: their calls are `custom_tool_call` items."""
    namespaces: dict[str, str] = field(default_factory=dict)
    """A namespaced tool's name -> its namespace (echoed on its calls)."""
    grammars: dict[str, tuple[str, str]] = field(default_factory=dict)
    """A grammar-typed custom tool's name -> (its Lark grammar, where it was given:
    `tools.N.format`): its input is produced under the grammar (`responses_choice`)."""

    @property
    def names(self) -> frozenset[str]:
        """Every offered tool's name."""
        return frozenset(t["function"]["name"] for t in self.chat_tools)


def _function(spec: InputItem, where: str) -> dict[str, Any]:
    name = spec.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 256:
        raise ApiError(400, f"{where}.name must be a non-empty string", param=f"{where}.name")
    function: dict[str, Any] = {"name": name}
    if isinstance(spec.get("description"), str):
        function["description"] = spec["description"]
    parameters = spec.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ApiError(400, f"{where}.parameters must be an object", param=f"{where}.parameters")
    function["parameters"] = parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _custom(spec: InputItem, where: str) -> dict[str, Any]:
    tool = _function({k: v for k, v in spec.items() if k != "parameters"}, where)
    tool["function"]["parameters"] = {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's input."}},
        "required": [CUSTOM_INPUT],
    }
    return tool


def custom_grammar(spec: InputItem, where: str) -> str | None:
    """A custom tool's `format` as a Lark grammar over its raw input (None: free text).
    `grammar` formats with syntax `lark` (Codex's `apply_patch`) or `regex` (a one-terminal
    grammar) are enforced by constrained decoding when the model calls the tool
    (`responses_choice`); any other format is a 400 naming `tools.N.format`."""
    fmt = spec.get("format") or {"type": "text"}
    if isinstance(fmt, dict) and fmt.get("type") == "text":
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        raise ApiError(400, f"{where}.format.type must be text or grammar", param=f"{where}.format")
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if not isinstance(definition, str) or not definition.strip():
        raise ApiError(400, f"{where}.format.definition must be a grammar", param=f"{where}.format")
    if syntax == "lark":
        return definition
    if syntax == "regex":
        return "start: /" + definition.replace("/", "\\/") + "/\n"
    raise ApiError(
        400,
        f"{where}.format.syntax {syntax!r} cannot be enforced (lark, regex)",
        param=f"{where}.format",
    )


def tool_set(tools: Sequence[InputItem] | None) -> ToolSet:
    """The request's tools, validated (400 naming the first bad one)."""
    chat: list[dict[str, Any]] = []
    custom: set[str] = set()
    namespaces: dict[str, str] = {}
    grammars: dict[str, tuple[str, str]] = {}

    def add_custom(spec: InputItem, where: str) -> None:
        chat.append(_custom(spec, where))
        custom.add(spec["name"])
        grammar = custom_grammar(spec, where)
        if grammar is not None:
            grammars[spec["name"]] = (grammar, f"{where}.format")

    for i, spec in enumerate(tools or ()):
        where = f"tools.{i}"
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind == "function":
            chat.append(_function(spec, where))
        elif kind == "custom":
            add_custom(spec, where)
        elif kind == "namespace" and isinstance(spec.get("tools"), list):
            for k, inner in enumerate(spec["tools"]):
                inner_where = f"{where}.tools.{k}"
                if not isinstance(inner, dict) or inner.get("type") not in ("function", "custom"):
                    raise ApiError(
                        400, f"{inner_where}.type must be function or custom", param=inner_where
                    )
                if inner["type"] == "custom":
                    add_custom(inner, inner_where)
                else:
                    chat.append(_function(inner, inner_where))
                namespaces[inner["name"]] = str(spec.get("name", ""))
        elif kind not in HOSTED_TOOLS:
            raise ApiError(
                400, f"{where}.type {kind!r} is not a supported tool kind", param=f"{where}.type"
            )
    names = [t["function"]["name"] for t in chat]
    if len(set(names)) != len(names):
        raise ApiError(400, "tools: two tools have the same name", param="tools")
    return ToolSet(tuple(chat), frozenset(custom), namespaces, grammars)


# -- input items to chat messages -------------------------------------------------------------

_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}.content must be a string or a list of parts", param=where)
    texts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PARTS:
            raise ApiError(
                400,
                f"{where}.content.{k}: only text parts are supported, not {kind!r}",
                param=f"{where}.content",
            )
        value = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(value, str):
            raise ApiError(400, f"{where}.content.{k}.text must be a string", param=where)
        texts.append(value)
    return "".join(texts)


def _call(item: InputItem, where: str) -> dict[str, Any]:
    """A `function_call` / `custom_tool_call` item as a chat tool call."""
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, f"{where}.name is required", param=f"{where}.name")
    if item["type"] == "custom_tool_call":
        value = item.get("input")
        if not isinstance(value, str):
            raise ApiError(400, f"{where}.input must be a string", param=f"{where}.input")
        arguments: Any = {CUSTOM_INPUT: value}
    else:
        raw = item.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else raw or {}
        except (json.JSONDecodeError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            raise ApiError(
                400, f"{where}.arguments must be a JSON object", param=f"{where}.arguments"
            )
    call_id = item.get("call_id") or item.get("id") or f"call_{uuid.uuid4().hex[:24]}"
    return {
        "id": str(call_id),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _text(output, where)
    raise ApiError(
        400, f"{where}.output must be a string or a list of text parts", param=f"{where}.output"
    )


_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def input_messages(instructions: str | None, items: Sequence[InputItem]) -> list[ChatMessage]:
    """Items as normalized chat messages (the shape `normalize_messages` makes); 400 naming the
    first bad item (`input.N`). `reasoning` items are dropped: this server samples no hidden
    reasoning, so a client passing one back changes nothing."""
    out: list[ChatMessage] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    names: dict[str, str] = {}
    open_reply = False  # the last message is an assistant reply that calls may still join
    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where} must be an object", param=where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "reasoning":
            continue
        if kind == "message":
            role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]
            if role is None:
                raise ApiError(
                    400,
                    f"{where}.role must be system, developer, user or assistant",
                    param=f"{where}.role",
                )
            out.append({"role": role, "content": _text(item.get("content", ""), where)})
            open_reply = role == "assistant"
        elif kind in ("function_call", "custom_tool_call"):
            call = _call({**item, "type": kind}, where)
            names[call["id"]] = call["function"]["name"]
            if not open_reply:
                out.append({"role": "assistant", "content": ""})
                open_reply = True
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise ApiError(400, f"{where}.call_id is required", param=f"{where}.call_id")
            message = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": _output_text(item.get("output"), where),
            }
            if call_id in names:
                message["name"] = names[call_id]
            out.append(message)
            open_reply = False
        else:
            raise ApiError(400, f"{where}.type {kind!r} is not supported", param=f"{where}.type")
    if not any(m["role"] != "system" for m in out):
        raise ApiError(400, "input must hold at least one message or tool output", param="input")
    return _one_system_first(out)


def _one_system_first(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The leading system messages (`instructions`, then Codex's several developer items) as
    one: many chat templates take a single system message, and only first."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    if lead < 2:
        return messages
    merged: ChatMessage = {
        "role": "system",
        "content": "\n\n".join(m["content"] for m in messages[:lead]),
    }
    return [merged, *messages[lead:]]


def thread_of(req: ResponsesRequest, messages: Sequence[ChatMessage]) -> str:
    """What tells a harness's conversations apart (`SessionStore.is_auxiliary`): its
    `prompt_cache_key` when it sends one (Codex: the thread's id, a sub-agent's its own),
    else its leading system text (`instructions` and system/developer items; a title
    request or a sub-agent brings its own)."""
    key = getattr(req, "prompt_cache_key", None)
    if isinstance(key, str) and key:
        return f"key:{key}"
    system = []
    for m in messages:
        if m["role"] != "system":
            break
        system.append(m["content"])
    text = "\x00".join(system)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- output items and the response ----------------------------------------------------------


def new_id(prefix: str) -> str:
    """An OpenAI-style id (`resp_...`, `msg_...`, `fc_...`)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(item_id: str, text: str, status: str = "completed") -> OutputItem:
    """An assistant `message` output item."""
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def output_items(r: Reply, tools: ToolSet) -> list[OutputItem]:
    """A reply as output items: its text (if any, or if nothing else) then one item per call."""
    items: list[OutputItem] = []
    if r.content or not r.output.calls:
        items.append(message_item(new_id("msg"), r.content or ""))
    for call, call_id in zip(r.output.calls, r.output.ids, strict=True):
        if call.name in tools.custom and set(call.arguments) == {CUSTOM_INPUT}:
            value = call.arguments[CUSTOM_INPUT]
            item: OutputItem = {
                "id": new_id("ctc"),
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call_id,
                "name": call.name,
                "input": value if isinstance(value, str) else json.dumps(value, ensure_ascii=False),
            }
        else:
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": "completed",
                "call_id": call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            }
        if call.name in tools.namespaces:
            item["namespace"] = tools.namespaces[call.name]
        items.append(item)
    return items


def response_usage(input_tokens: int, output_tokens: int) -> Usage:
    """The Responses API's `usage` object."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


class ResponseObject(TypedDict):
    """The `response` object (OpenAI's fields; see `ResponseHead.body`)."""

    id: str
    """`resp_...`."""
    object: str
    """`response`."""
    created_at: int
    """Unix seconds."""
    status: str
    """`in_progress`, `completed`, `incomplete` or `failed`."""
    error: dict[str, str] | None
    """`code` and `message` of a failed response."""
    incomplete_details: dict[str, str] | None
    """`reason: max_output_tokens` of an incomplete one."""
    instructions: str | None
    """Echoed."""
    max_output_tokens: int | None
    """Echoed."""
    model: str
    """The served model."""
    output: list[OutputItem]
    """The reply's items."""
    parallel_tool_calls: bool
    """Echoed."""
    previous_response_id: str | None
    """Echoed."""
    reasoning: dict[str, None]
    """No reasoning is sampled."""
    store: bool
    """Echoed (`false`: the items are not kept for `previous_response_id`)."""
    temperature: float
    """Echoed."""
    text: dict[str, dict[str, str]]
    """`format: text`."""
    tool_choice: object
    """Echoed."""
    tools: list[InputItem]
    """Echoed."""
    top_p: float
    """Echoed."""
    truncation: str
    """`disabled`."""
    usage: Usage | None
    """Set once the reply is known."""
    user: str | None
    """Echoed."""
    metadata: object
    """Echoed."""


@dataclass(frozen=True)
class ResponseHead:
    """What every snapshot of one response shares (created, in progress, completed)."""

    id: str
    """`resp_...`."""
    model: str
    """The served model's name."""
    req: ResponsesRequest
    """The request (echoed fields)."""
    created_at: int = field(default_factory=lambda: int(time.time()))
    """Unix seconds."""

    def body(
        self,
        status: str,
        output: Sequence[OutputItem] = (),
        usage: Usage | None = None,
    ) -> ResponseObject:
        """The `response` object in `status` (`in_progress`, `completed`, `incomplete`)."""
        req = self.req
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.model,
            "output": list(output),
            "parallel_tool_calls": bool(getattr(req, "parallel_tool_calls", True)),
            "previous_response_id": req.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "store": bool(getattr(req, "store", True)),
            "temperature": req.temperature,
            "text": {"format": {"type": "text"}},
            "tool_choice": req.tool_choice or "auto",
            "tools": list(req.tools or []),
            "top_p": req.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": req.user,
            "metadata": getattr(req, "metadata", None) or {},
        }
