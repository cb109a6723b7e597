"""The Anthropic Messages API's wire format: request bodies, content blocks as chat messages,
Anthropic's error shape.

Requests accept (and ignore) fields they do not know, as the other routes do; known fields are
validated, and a bad value is a 400 naming the field. Content blocks are read by hand rather
than by a pydantic union, so that an unsupported block (an image, a document, a server tool's
result) is refused with a message naming the block and its type.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator

from skyrl_sdk.agents.policy import FinishReason
from skyrl_sdk.agents.serving.generation import Reply
from skyrl_sdk.agents.serving.protocol import MAX_SEED, ApiError
from skyrl_sdk.sampling_limits import stop_problem

MAX_STOP_SEQUENCES = 4
"""Most `stop_sequences` one request may give (the chat route's cap on `stop`)."""

DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Assistant blocks accepted and not rendered: this server never writes them, so a harness
that sends them back got them from elsewhere, and the served model's template has no place
for them."""

_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    499: "invalid_request_error",
    500: "api_error",
    503: "overloaded_error",
}


class ErrorDetail(TypedDict):
    """The `error` of an error body."""

    type: str
    """Anthropic's error type (`invalid_request_error`, `not_found_error`, ...)."""
    message: str
    """What was wrong."""


class ErrorBody(TypedDict):
    """Anthropic's error body (also the data of a stream's `error` event)."""

    type: Literal["error"]
    """Always `error`."""
    error: ErrorDetail
    """The error."""


class ContentBlock(TypedDict):
    """A content block of an answer: `text` (with `text`) or `tool_use` (`id`, `name`,
    `input`)."""

    type: Literal["text", "tool_use"]
    """The block's kind."""
    text: NotRequired[str]
    """A text block's text."""
    id: NotRequired[str]
    """A tool_use block's id (`toolu_...`)."""
    name: NotRequired[str]
    """The tool called."""
    input: NotRequired[dict[str, Any]]
    """The call's input (a JSON object)."""


class Usage(TypedDict):
    """Anthropic's `usage`."""

    input_tokens: int
    """Prompt ids."""
    output_tokens: int
    """Sampled ids."""
    cache_creation_input_tokens: int
    """Always 0: no prompt cache."""
    cache_read_input_tokens: int
    """Always 0: no prompt cache."""


class MessageBody(TypedDict):
    """A `message` object."""

    id: str
    """`msg_...`."""
    type: Literal["message"]
    """Always `message`."""
    role: Literal["assistant"]
    """Always `assistant`."""
    model: str
    """The served model."""
    content: list[ContentBlock]
    """The reply's blocks."""
    stop_reason: str | None
    """Why the reply ended (None in `message_start`)."""
    stop_sequence: str | None
    """The stop sequence that ended it, if one did."""
    usage: Usage
    """Token counts."""


class ChatFunction(TypedDict):
    """A tool as a chat template's function."""

    name: str
    """The tool's name."""
    parameters: dict[str, Any]
    """Its input's JSON schema."""
    description: NotRequired[str]
    """What it does."""


class ChatTool(TypedDict):
    """A tool in OpenAI's function shape, what chat templates read."""

    type: Literal["function"]
    """Always `function`."""
    function: ChatFunction
    """The function."""


class ChatMessage(TypedDict):
    """A request message as the chat path renders it (`prompts.normalize_messages` input)."""

    role: Literal["system", "user", "assistant", "tool"]
    """The chat role."""
    content: str
    """Its text."""
    tool_calls: NotRequired[list[dict[str, Any]]]
    """An assistant message's calls (`{"id", "type", "function": {"name", "arguments"}}`)."""
    tool_call_id: NotRequired[str]
    """Which call a tool message answers."""


def error_kind(status: int) -> str:
    """Anthropic's error `type` for an HTTP status."""
    return _KINDS.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str) -> ErrorBody:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`."""
    return {"type": "error", "error": {"type": error_kind(status), "message": message}}


def api_error_body(e: ApiError) -> ErrorBody:
    """An `ApiError` in Anthropic's shape (the field at fault is named in the message)."""
    message = e.message
    if e.param and e.param not in message:
        message = f"{e.param}: {message}"
    return error_body(e.status, message)


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class ToolParam(_Body):
    """One entry of `tools`: a client tool (the harness runs it)."""

    name: str = Field(min_length=1, max_length=256)
    """The tool's name."""
    description: str | None = None
    """What it does (rendered by the chat template)."""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON schema of its input."""
    type: str | None = None
    """None or `custom`; Anthropic's server tools (web search, code execution, ...) cannot run
    here and are refused."""

    @field_validator("type")
    @classmethod
    def _client_tool(cls, value: str | None) -> str | None:
        if value not in (None, "custom"):
            raise ValueError(f"the server tool {value!r} is not available on this server")
        return value

    def chat_tool(self) -> ChatTool:
        """The tool as a chat template reads it (OpenAI's function shape)."""
        function: ChatFunction = {"name": self.name, "parameters": self.input_schema}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


class ToolChoice(_Body):
    """`tool_choice`."""

    type: Literal["auto", "any", "tool", "none"]
    """`auto` (the model decides), `any` (some tool), `tool` (the named one), `none`."""
    name: str | None = None
    """The tool, for `type: tool`."""
    disable_parallel_tool_use: bool = False
    """Accepted; a reply may hold several calls."""


class MessageParam(_Body):
    """One message of `messages`."""

    role: Literal["user", "assistant", "system"]
    """`system` is what Claude Code sends for mid-conversation system turns."""
    content: str | list[dict[str, Any]]
    """Text, or content blocks."""


class Metadata(_Body):
    """`metadata`."""

    user_id: str | None = Field(default=None, max_length=256)
    """The end user; groups requests into a session when the URL names none."""


class CountTokensRequest(_Body):
    """`POST /v1/messages/count_tokens`: a Messages request without sampling fields."""

    model: str = Field(min_length=1)
    """The served model's name."""
    messages: list[MessageParam] = Field(min_length=1)
    """The conversation."""
    system: str | list[dict[str, Any]] | None = None
    """The system prompt: text, or text blocks (`cache_control` ignored)."""
    tools: list[ToolParam] | None = None
    """Tools the model may call."""
    tool_choice: ToolChoice | None = None
    """How the model may use `tools`."""
    metadata: Metadata | None = None
    """`user_id` names a session."""


class MessagesRequest(CountTokensRequest):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    """Most tokens to generate (required, as Anthropic requires it; clamped to what the
    model's context leaves, the reply then ending with `stop_reason: max_tokens`)."""
    stop_sequences: list[str] | None = None
    """Up to 4 strings that end the reply (reported as `stop_reason: stop_sequence`)."""
    temperature: float = Field(default=1.0, ge=0.0, le=1.0)
    """Softmax temperature (Anthropic's range, 0 to 1); 0 is greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus mass."""
    top_k: int = Field(default=0, ge=0)
    """Keep the k most likely tokens (0: off)."""
    stream: bool = False
    """Answer as server-sent events."""

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, value: list[str] | None) -> list[str] | None:
        problem = stop_problem(value or [], (), max_strings=MAX_STOP_SEQUENCES)
        if problem is not None:
            raise ValueError(problem)
        if any(not s for s in value or []):
            raise ValueError("stop sequences must not be empty")
        return value

    def stops(self) -> tuple[str, ...]:
        """`stop_sequences` as a tuple."""
        return tuple(self.stop_sequences or ())

    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    """skyrl extension (as on the OpenAI routes): sampler seed, same request, same tokens."""

    def token_limit(self) -> int:
        """`max_tokens`."""
        return self.max_tokens


def _system_text(system: str | list[dict[str, Any]] | None, where: str = "system") -> str:
    """The system prompt as one text (text blocks joined by newlines)."""
    if system is None or isinstance(system, str):
        return system or ""
    return "\n".join(_text_block(b, f"{where}.{k}") for k, b in enumerate(system))


def _text_block(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text":
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        raise ApiError(
            400, f"{where}: only text blocks are supported here, not {kind!r}", param=where
        )
    text = block.get("text")
    if not isinstance(text, str):
        raise ApiError(400, f"{where}.text must be a string", param=where)
    return text


def _tool_result(block: dict[str, Any], where: str) -> ChatMessage:
    """A `tool_result` block as a chat `tool` message (an error result says so first)."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise ApiError(400, f"{where}.tool_use_id is required", param=f"{where}.tool_use_id")
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    elif isinstance(content, list):
        text = "\n".join(_text_block(b, f"{where}.content.{k}") for k, b in enumerate(content))
    else:
        raise ApiError(400, f"{where}.content must be text or text blocks", param=where)
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    """A `tool_use` block as a chat tool call (arguments as an object)."""
    name, arguments = block.get("name"), block.get("input", {})
    if not isinstance(name, str) or not name:
        raise ApiError(400, f"{where}.name is required", param=f"{where}.name")
    if not isinstance(arguments, dict):
        raise ApiError(400, f"{where}.input must be an object", param=f"{where}.input")
    call_id = block.get("id")
    return {
        "id": str(call_id or "toolu_0"),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _user(m: MessageParam, where: str) -> list[ChatMessage]:
    """A user message's blocks, in order: runs of text as user messages, results as tool ones."""
    if isinstance(m.content, str):
        return [{"role": "user", "content": m.content}]
    out: list[ChatMessage] = []
    texts: list[str] = []
    for k, block in enumerate(m.content):
        at = f"{where}.content.{k}"
        if isinstance(block, dict) and block.get("type") == "tool_result":
            if texts:
                out.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            out.append(_tool_result(block, at))
        else:
            texts.append(_text_block(block, at))
    if texts or not out:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _assistant(m: MessageParam, where: str) -> ChatMessage:
    """An assistant message: its text blocks as content, its `tool_use` blocks as calls."""
    if isinstance(m.content, str):
        return {"role": "assistant", "content": m.content}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(m.content):
        at = f"{where}.content.{k}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind not in DROPPED_BLOCKS:
            texts.append(_text_block(block, at))
    message: ChatMessage = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(req: CountTokensRequest) -> list[ChatMessage]:
    """The request as chat messages (the shape `prompts.chat_prompt` renders); 400 naming the
    first block that cannot be rendered."""
    out: list[ChatMessage] = []
    system = _system_text(req.system)
    if system:
        out.append({"role": "system", "content": system})
    for i, m in enumerate(req.messages):
        where = f"messages.{i}"
        if m.role == "user":
            out.extend(_user(m, where))
        elif m.role == "assistant":
            out.append(_assistant(m, where))
        else:
            out.append({"role": "system", "content": _system_text(m.content, f"{where}.content")})
    if req.messages[-1].role == "assistant":
        where = f"messages.{len(req.messages) - 1}"
        raise ApiError(
            400,
            f"{where}: a final assistant message (prefill) is not supported: the reply "
            "always starts a new assistant turn",
            param=where,
        )
    return out


def thread_of(req: CountTokensRequest) -> str:
    """What tells a harness's conversations apart: its system prompt. A harness's main
    conversation keeps one system prompt; its title requests and sub-agents bring their own."""
    text = _system_text(req.system)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- response pieces ----------------------------------------------------------------------


def tool_use_id(call_id: str) -> str:
    """Anthropic's id for a call (`toolu_...`) from the server's (`call_...`)."""
    return "toolu_" + call_id.removeprefix("call_")


def content_blocks(r: Reply) -> list[ContentBlock]:
    """The reply's content blocks: its text (if any), then one `tool_use` block per call."""
    blocks: list[ContentBlock] = []
    text = r.content or ""
    if text:
        blocks.append({"type": "text", "text": text})
    for call, call_id in zip(r.output.calls, r.output.ids, strict=True):
        blocks.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call_id),
                "name": call.name,
                "input": call.arguments,
            }
        )
    return blocks


def stop_of(r: Reply, stops: tuple[str, ...]) -> tuple[str, str | None]:
    """`stop_reason` and `stop_sequence`: `tool_use` when the reply calls a tool,
    `max_tokens` when it ran out of tokens, `stop_sequence` (naming it) when one of `stops`
    ended it, else `end_turn`."""
    if r.output.calls:
        return "tool_use", None
    if r.completion.finish_reason is FinishReason.LENGTH:
        return "max_tokens", None
    text = r.completion.text
    found = [(at, s) for s in stops if (at := text.find(s)) >= 0]
    if found:
        return "stop_sequence", min(found)[1]
    return "end_turn", None


def usage(input_tokens: int, output_tokens: int) -> Usage:
    """Anthropic's `usage` (no prompt caching here: the cache counts are 0)."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message_body(
    message_id: str,
    model: str,
    content: list[ContentBlock],
    stop: tuple[str | None, str | None],
    tokens: tuple[int, int],
) -> MessageBody:
    """A `message` object (the non-streamed answer; `message_start`'s with no content yet)."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": usage(*tokens),
    }
