"""Chat requests to prompt token ids, with the model's own replies kept as the ids it sampled.

An OpenAI client sends the whole conversation every turn, the model's earlier replies included,
as text or structured `tool_calls`. Rendering and tokenizing that text again would give the
canonical tokenization, which need not be what the model sampled (BPE has many tokenizations
of one text; a template may reformat a tool call). So each reply the server answered is
remembered per session under a key of its content and calls, and when it comes back it is
rendered as a placeholder that is then replaced by the exact sampled ids. Only the template's
own text around it is tokenized. A reply the server does not recognise (the harness edited or
invented it) is rendered and tokenized as text, so the prompt no longer extends the previous
turn's tokens, and the capture records a new segment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.serving.protocol import ApiError

if TYPE_CHECKING:
    from skyrl_sdk.agents.chat import ChatRenderer

PIECE_CHARS = 1 << 14
"""A text longer than this many characters is first counted in pieces this long."""

ROLES = ("system", "developer", "user", "assistant", "tool")
"""Roles a request message may have (`developer` is rendered as `system`)."""

_MARK = "SKYRLREPLY{}X"


def encode_within(renderer: ChatRenderer, text: str, limit: int | None) -> tuple[int, ...] | None:
    """`text`'s token ids, or None if it has far more than `limit` tokens.

    Tokenizing a whole long text is what costs (a 48 MB prompt took a tokenizer to 7.7 GB and
    100 s only to be refused for its length), so a long text is first counted in pieces,
    stopping once the count passes twice the limit (pieces may differ from the whole by a
    token or two at each cut, hence the margin).
    """
    if limit is not None and len(text) > PIECE_CHARS:
        count = 0
        for start in range(0, len(text), PIECE_CHARS):
            count += len(renderer.encode(text[start : start + PIECE_CHARS]))
            if count > 2 * limit:
                return None
    return renderer.encode(text)


def content_text(content: Any, where: str) -> str:
    """A message's `content` as text: a string, a list of text parts, or None (empty)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError(
                    400,
                    f"{where}.content.{i}: only text content parts are supported",
                    param=f"{where}.content",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError(400, f"{where}.content.{i}.text must be a string", param=where)
            parts.append(text)
        return "".join(parts)
    raise ApiError(400, f"{where}.content must be a string or a list of text parts", param=where)


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
    raise ApiError(400, f"{where}.function.arguments must be a JSON object", param=where)


def normalize_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Request messages in the shape chat templates read; 400 naming the first bad one.

    Content becomes a string; `developer` becomes `system`; tool calls keep their id, name
    and arguments (parsed to an object, as Hermes/Qwen templates expect).
    """
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise ApiError(
                400, f"{where}.role must be one of {', '.join(ROLES)}", param=f"{where}.role"
            )
        message: dict[str, Any] = {
            "role": "system" if role == "developer" else role,
            "content": content_text(m.get("content"), where),
        }
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise ApiError(400, f"{where}.tool_calls must be a list", param=where)
            message["tool_calls"] = []
            for k, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                name = fn.get("name") if isinstance(fn, dict) else None
                if not isinstance(name, str) or not name:
                    raise ApiError(
                        400,
                        f"{where}.tool_calls.{k} must be a function call with a name",
                        param=f"{where}.tool_calls",
                    )
                message["tool_calls"].append(
                    {
                        "id": str(call.get("id") or f"call_{k}"),
                        "type": "function",
                        "function": {
                            "name": name,
                            "arguments": _arguments(fn.get("arguments"), f"{where}.tool_calls.{k}"),
                        },
                    }
                )
        elif m.get("content") is None and role != "assistant":
            raise ApiError(400, f"{where}.content is required", param=f"{where}.content")
        if role == "tool":
            for field in ("tool_call_id", "name"):
                if isinstance(m.get(field), str):
                    message[field] = m[field]
        elif isinstance(m.get("name"), str):
            message["name"] = m["name"]
        out.append(message)
    return out


def reply_key(content: str, tool_calls: Sequence[dict[str, Any]] = ()) -> str:
    """What identifies an assistant reply when a client sends it back: its text (outer
    whitespace aside) and its calls' names and arguments (ids aside; clients make up their
    own). The server stores each answered reply under this key."""
    calls = [
        [c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True)]
        for c in tool_calls
    ]
    return json.dumps([content.strip(), calls], ensure_ascii=False)


@dataclass(frozen=True)
class SampledReply:
    """A reply the server answered: the exact ids sampled for it."""

    token_ids: tuple[int, ...]
    """The sampled ids, a final stop token included."""


@dataclass(frozen=True)
class ChatPrompt:
    """A chat request's prompt."""

    token_ids: tuple[int, ...]
    """The ids the policy is given."""
    messages: tuple[dict[str, Any], ...]
    """The normalized request messages."""
    reused: int
    """How many assistant messages were mapped back to their sampled ids."""


def render(
    renderer: ChatRenderer,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
) -> str:
    """The chat template's text for `messages` and `tools`, with the generation prompt."""
    try:
        return renderer.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=list(tools) if tools else None,
            chat_template=renderer.chat_template,
            add_generation_prompt=True,
            tokenize=False,
        )
    except Exception as e:  # jinja: raise_exception in the template, unknown roles
        raise ApiError(400, f"the chat template cannot render these messages: {e}") from None


def chat_prompt(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    replies: Mapping[str, SampledReply],
    limit: int | None,
) -> ChatPrompt:
    """Render `messages` (normalized) to ids, splicing in the sampled ids of known replies."""
    marked: list[dict[str, Any]] = []
    spliced: list[SampledReply] = []
    for m in messages:
        reply = None
        if m["role"] == "assistant":
            reply = replies.get(reply_key(m["content"], m.get("tool_calls", ())))
        if reply is None:
            marked.append(m)
        else:
            marked.append({"role": "assistant", "content": _MARK.format(len(spliced))})
            spliced.append(reply)
    text = render(renderer, marked, tools)
    pieces = _split(text, len(spliced))
    if pieces is None:  # the template dropped or rewrote a reply: plain text it is
        spliced = []
        pieces = [render(renderer, messages, tools)]
    ids: list[int] = []
    for k, piece in enumerate(pieces):
        if k > 0:
            sampled = spliced[k - 1].token_ids
            ids.extend(sampled)
            stop = ""
            if sampled and sampled[-1] in renderer.stop_token_ids:
                stop = renderer.decode(sampled[-1:])
            if stop and piece.startswith(stop):
                piece = piece[len(stop) :]  # the model wrote the end-of-turn token itself
        budget = None if limit is None else max(1, limit - len(ids))
        encoded = encode_within(renderer, piece, budget)
        if encoded is None:
            raise ApiError(
                400,
                f"the messages are far longer than the model's context of {limit} tokens",
                param="messages",
                code="context_length_exceeded",
            )
        ids.extend(encoded)
    return ChatPrompt(tuple(ids), tuple(messages), len(spliced))


def _split(text: str, count: int) -> list[str] | None:
    pieces = []
    rest = text
    for k in range(count):
        mark = _MARK.format(k)
        head, found, rest = rest.partition(mark)
        if not found or mark in rest:
            return None
        pieces.append(head)
    pieces.append(rest)
    return pieces
