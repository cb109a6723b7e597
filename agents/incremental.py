"""Incremental chat rendering: per-turn cost independent of the conversation and of Jinja.

The agent loop appends, each turn, the chat template's *delta* for the new messages (see
`skyrl_sdk.agents.chat`). Rendering that delta with Jinja and tokenizing it from scratch
costs far more than a fast env's whole step, so `ChatRenderer` uses two caches from here:

`TemplateCache`: the template's text for a conversation *shape* (each message's role and
field names, the opening messages included), learned once by rendering the shape with
placeholder contents, then filled in with plain string joins. A shape is cached only when
it passes two checks against real Jinja renders: the template must insert every field
verbatim or trimmed (the only transforms recognised), which is checked with probe contents
full of whitespace, tags, quotes and braces, and the filled text must equal the real render
of the first conversation that uses the shape. A shape that fails either check is rendered
with Jinja every time (correct, just slower). The limit: a template whose output depends on
the *content* of a message in a way none of the probes shows (say, a branch on one magic
word) could be cached wrongly; `ChatRenderer(verify_incremental=True)` renders with Jinja
on every call as well and raises `TemplateError` on any difference (the conformance tests
run with it).

`SegmentEncoder`: exact tokenization by pieces. Tokenizers split their input at added
(special) tokens before anything else, so a text's ids are the ids of the special tokens
and of the pieces between them. Pieces repeat (system prompts, tool instructions, role
headers, the `\\n` after `<|im_end|>`), so their ids are kept in a bounded cache (oldest
out first) and only new text is tokenized; whole texts are kept the same way, since they
recur as well (the prompts of a GRPO group, a tool's error message). At construction the
splitting is checked against the tokenizer on probe texts (whitespace on either side of
each special token, several in a row, ...); a tokenizer that strips around its special
tokens or marks only the first piece with a prefix space fails the check, and then the
whole text is tokenized every time.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_sdk.tools.messages import Message

__all__ = ["FULL_RENDER", "SegmentEncoder", "Shape", "SlotTemplate", "TemplateCache", "shape_of"]

Shape = tuple[tuple[str, tuple[str, ...]], ...]
"""Each message's role and field names, in order."""


def shape_of(messages: Sequence[Message]) -> Shape:
    """The shape of a conversation: what a template's control flow may depend on besides
    the contents (roles, which fields are present, how many messages)."""
    return tuple([(m["role"], tuple(m)) for m in messages])


def _placeholder(message: int, field: int) -> str:
    """A plain-letter marker for one field (templates may escape anything else)."""
    a, b = divmod(message, 26)
    c, d = divmod(field, 26)
    return f"SKYRLSLOT{chr(65 + a)}{chr(65 + b)}{chr(65 + c)}{chr(65 + d)}Q"


# Contents that expose templates which transform or inspect what they insert.
_PROBES = (
    " \n lead and trail \n ",
    '<think>x</think> <tool_call>{"a": 1}</tool_call> <tool_response>\'"&<>{{ }}</tool_response>',
    "",
    "ünïcode \t tabs\r\nand {% raw %} %} ",
)


@dataclass(frozen=True)
class SlotTemplate:
    """A rendered region as literal text and slots: `(message index, field, trimmed)`."""

    pieces: tuple[str | tuple[int, str, bool], ...]
    """Literal strings, and slots that insert a field of a message (stripped when True)."""

    def fill(self, messages: Sequence[Message]) -> str:
        """The region's text for `messages` (of the template's shape)."""
        out = []
        for piece in self.pieces:
            if type(piece) is str:
                out.append(piece)
            else:
                index, name, trimmed = piece  # type: ignore[misc]
                value = messages[index][name]  # type: ignore[literal-required]
                out.append(value.strip() if trimmed else value)
        return "".join(out)


FULL_RENDER = None
"""The cache's entry for a shape that must always be rendered with Jinja."""

Region = Callable[[Sequence[Message]], str]
"""Renders a region (the prompt, or a turn's delta) of a conversation, as real Jinja does."""


class TemplateCache:
    """Slot templates per (kind, shape), each verified against real renders (see module doc).

    Thread-safe; bounded to `max_shapes` entries (least recently built dropped first).
    """

    def __init__(self, *, max_shapes: int = 256):
        self.max_shapes = max_shapes
        """Shapes kept; conversations rarely have more than a handful."""
        self._entries: OrderedDict[Any, SlotTemplate | None] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        """Renders served from a cached template."""
        self.misses = 0
        """Renders done with Jinja (new shapes, and shapes that failed their checks)."""

    def get(self, key: Any) -> SlotTemplate | None:
        """The verified template of `key`, or None (not learned yet, or rendered with Jinja
        every time): then call `render`."""
        entry = self._entries.get(key)
        if entry is not None:
            self.hits += 1
        return entry

    def render(
        self,
        key: Any,
        messages: Sequence[Message],
        region: Region,
        *,
        fixed: frozenset[int] = frozenset(),
        real: Callable[[], str] | None = None,
    ) -> str:
        """The text `region(messages)` gives, from the cached template of `key` when there
        is a verified one. `key` must determine the shape of `messages`; the messages at
        the indexes in `fixed` keep their contents in probes (and in the template); `real`,
        when given, computes `region(messages)` more cheaply."""
        entry = self._entries.get(key, False)
        if entry is False:
            entry, text = self._build(messages, region, fixed, real)
            with self._lock:
                self._entries[key] = entry
                while len(self._entries) > self.max_shapes:
                    self._entries.popitem(last=False)
            self.misses += 1
            return text
        if entry is FULL_RENDER:
            self.misses += 1
            return real() if real is not None else region(messages)
        self.hits += 1
        return entry.fill(messages)  # type: ignore[union-attr]

    @staticmethod
    def _build(
        messages: Sequence[Message],
        region: Region,
        fixed: frozenset[int],
        real_text: Callable[[], str] | None,
    ) -> tuple[SlotTemplate | None, str]:
        """Learn the template of `messages`' shape; return it (or FULL_RENDER) and the real
        text for `messages` (which any exception of the template propagates from)."""
        real = real_text() if real_text is not None else region(messages)
        if len(messages) > 676 or any(len(m) > 676 for m in messages):
            return FULL_RENDER, real
        names = [list(m) for m in messages]

        def probe(value: Callable[[int, int], str]) -> list[Message]:
            return [
                m
                if i in fixed
                else {k: v if k == "role" else value(i, j) for j, (k, v) in enumerate(m.items())}  # type: ignore[misc]
                for i, m in enumerate(messages)
            ]

        try:
            bare = region(probe(_placeholder))
            padded = region(probe(lambda i, j: f" \n{_placeholder(i, j)}\n "))
        except Exception:
            return FULL_RENDER, real
        slots = re.compile(r"SKYRLSLOT([A-Z]{4})Q")
        pieces: list[str | tuple[int, str, bool]] = []
        pos = 0
        for match in slots.finditer(bare):
            code = [ord(c) - 65 for c in match.group(1)]
            i, j = code[0] * 26 + code[1], code[2] * 26 + code[3]
            if i >= len(messages) or j >= len(names[i]):
                return FULL_RENDER, real
            marker = match.group(0)
            if f" \n{marker}\n " in padded:
                trimmed = False
            elif marker in padded:
                trimmed = True
            else:
                return FULL_RENDER, real
            pieces.append(bare[pos : match.start()])
            pieces.append((i, names[i][j], trimmed))
            pos = match.end()
        pieces.append(bare[pos:])
        template = SlotTemplate(tuple(p for p in pieces if p != ""))
        try:
            for content in _PROBES:
                sample = probe(lambda i, j, c=content: f"{c}{i}.{j}{c}")
                if template.fill(sample) != region(sample):
                    return FULL_RENDER, real
        except Exception:
            return FULL_RENDER, real
        if template.fill(messages) != real:
            return FULL_RENDER, real
        return template, real


class SegmentEncoder:
    """Tokenize by pieces between special tokens, caching each piece's ids (exact; see the
    module docstring). Thread-safe; the cache holds at most `max_chars` characters of text."""

    def __init__(
        self,
        encode: Callable[[str], Sequence[int]],
        added_tokens: Mapping[str, int],
        *,
        max_chars: int = 4_000_000,
        max_piece_chars: int = 65_536,
    ):
        self._encode = encode
        self._added = dict(added_tokens)
        self.max_chars = max_chars
        """Characters of cached pieces kept (the oldest dropped first)."""
        self.max_piece_chars = max_piece_chars
        """Longer pieces are tokenized every time (they rarely repeat)."""
        self._cache: dict[str, tuple[int, ...]] = {}
        self._chars = 0
        self._lock = threading.Lock()
        self._split = (
            re.compile(
                "("
                + "|".join(re.escape(t) for t in sorted(self._added, key=len, reverse=True))
                + ")"
            )
            if self._added
            else None
        )
        self.enabled = self._split is not None and self._agrees()
        """False when splitting at added tokens does not reproduce the tokenizer; then
        `encode` tokenizes whole texts."""

    def encode(self, text: str) -> tuple[int, ...]:
        """The ids the tokenizer gives `text` (no special tokens added)."""
        if not self.enabled:
            return tuple(self._encode(text))
        cached = self._cache.get(text)  # whole texts recur too (group prompts, tool errors)
        if cached is not None:
            return cached
        ids = self._by_pieces(text)
        if len(text) <= self.max_piece_chars:
            self._remember(text, ids)
        return ids

    def _by_pieces(self, text: str) -> tuple[int, ...]:
        assert self._split is not None
        ids: list[int] = []
        parts = self._split.split(text)
        cache, added = self._cache, self._added
        for k in range(0, len(parts), 2):
            if part := parts[k]:
                cached = cache.get(part)
                ids.extend(cached if cached is not None else self._piece(part))
            if k + 1 < len(parts):
                ids.append(added[parts[k + 1]])
        return tuple(ids)

    def _piece(self, piece: str) -> tuple[int, ...]:
        cached = self._cache.get(piece)  # lock-free: a dict read is atomic
        if cached is not None:
            return cached
        ids = tuple(self._encode(piece))
        if len(piece) <= self.max_piece_chars:
            self._remember(piece, ids)
        return ids

    def _remember(self, text: str, ids: tuple[int, ...]) -> None:
        with self._lock:
            if text not in self._cache:
                self._cache[text] = ids
                self._chars += len(text)
                while self._chars > self.max_chars:  # oldest first
                    old = next(iter(self._cache))
                    self._chars -= len(old)
                    del self._cache[old]

    def _agrees(self) -> bool:
        """Whether piecewise encoding equals the tokenizer on texts that would expose a
        tokenizer treating the text around added tokens specially."""
        texts = ["plain text", " leading space", "two\n\nlines \n"]
        tokens = list(self._added)
        for t in tokens:
            texts += [f"a{t}b", f" {t} ", f"\n{t}\n", f"{t}{t}", f"x {t}  y\n", f"{t} z", f"{t}\n"]
        texts.append(" ".join(tokens) + "\n" + "\n".join(tokens) + " end")
        try:
            return all(self._by_pieces(t) == tuple(self._encode(t)) for t in texts)
        except Exception:
            return False
