"""Constrained decoding: a grammar applied as a token mask in the sampler, per request.

A `Constraint` says what a completion must be: a JSON document matching a schema
(`Constraint.json_schema`, OpenAI's `response_format: json_schema`), any JSON object
(`Constraint.json_object`), one or more tool calls in the renderer's tool-call syntax with
each function's arguments schema (`Constraint.tool_calls`, for `tool_choice: "required"` or a
named function; a function given a `grammar` is a grammar-typed custom tool whose input is
written under that Lark grammar inside the call's JSON string, see `lark_json`; `optional`
for `tool_choice: auto`, free text until a call opens), or a Lark grammar (`Constraint.lark`). It is
plain data (no grammar library is needed to build one), and rides on the request's
`SamplingParams.constraint`.

How to use it (any route or caller of a policy)::

    from skyrl_sdk.agents.engine.constraints import Constraint, ConstraintError, ToolCallSyntax

    constraint = Constraint.tool_calls(
        [ToolFunction("get_weather", {"type": "object", ...})],
        syntax=ToolCallSyntax.HERMES, name="get_weather",  # name=None: any of them
    )
    try:
        constraint.check(renderer.tokenizer)  # ConstraintError: answer 400 naming the field
    except ConstraintError as e: ...
    sampling = dataclasses.replace(sampling, constraint=constraint)
    completion = await policy.generate(prompt, sampling)  # completion.constrained is True

A policy enforces constraints when its `supports_constraints` is true: `LocalEngine` masks
each step with the grammar (the sampled ids are the model's own tokens, the grammar only
removes the ones it forbids, so tool calls come out token-exact, never re-tokenised); the
OpenAI-compatible client and `VLLMEngine` pass it on to the server or engine they call
(`Constraint.upstream`: `response_format` / vLLM's `structured_outputs`), which enforces it.

**Logprobs.** A constrained step samples from the masked, renormalised distribution, and that
is the logprob reported and captured; the completion (and its captured turn) is marked
`constrained`. The learner's unmasked logprobs then differ from the sampler's by the mask's
mass, which the trainer's truncated importance sampling (`trainer.losses.truncated_is_weights`,
ratio learner / sampler, capped) corrects for like any other sampler mismatch.

**Library.** The grammars are compiled and matched by llguidance (the `grammar` extra):
`pip install 'skyrl-sdk[grammar]'`. It was chosen over xgrammar and outlines-core for having
no dependencies of its own, compiling a schema in about a millisecond (no per-vocabulary
precomputation), Lark grammars with embedded JSON schemas (which the tool-call grammar
uses), and errors that name unsupported schema keywords. On SmolLM2-135M's 49k-token
vocabulary on CPU a mask costs ~0.04 ms a token on average.
"""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from skyrl_sdk.tools.formats import HermesFormat, MistralFormat

if TYPE_CHECKING:
    import torch

EXTRA = "grammar"
"""The optional extra that installs the grammar library."""

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How constrained JSON is written: `json.dumps`'s default separators and no other
whitespace, so a model cannot spend its token budget on blanks (and tool calls look like the
ones the chat template renders)."""


CUSTOM_INPUT = "input"
"""The one string argument of a custom tool's call (`{"input": "..."}`)."""


class UpstreamFields(TypedDict, total=False):
    """Request fields that pass a `Constraint` on to an OpenAI-compatible server."""

    response_format: Mapping[str, Any]
    """OpenAI's `response_format` (`json_schema`)."""
    structured_outputs: Mapping[str, Any]
    """vLLM's `structured_outputs` (`{"grammar": <lark>}`)."""


class ConstraintError(ValueError):
    """A constraint that cannot be enforced: an invalid or unsupported grammar or schema (the
    message names the problem), or no grammar library installed."""


class ConstraintKind(enum.Enum):
    """What a `Constraint` describes."""

    JSON_SCHEMA = "json_schema"
    """A JSON document valid under a schema."""
    JSON_OBJECT = "json_object"
    """Any JSON object."""
    TOOL_CALLS = "tool_calls"
    """Tool calls in a tool-call syntax (a Lark grammar embedding each arguments schema)."""
    LARK = "lark"
    """A Lark grammar (llguidance's dialect)."""


class ToolCallSyntax(enum.Enum):
    """The tool-call syntaxes a tool-call grammar can produce (those `skyrl serve` parses)."""

    HERMES = "hermes"
    """`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, calls one a line."""
    MISTRAL = "mistral"
    """`[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`."""
    LLAMA3 = "llama3"
    """`{"name": ..., "parameters": {...}}`, calls separated by `; `."""


@dataclass(frozen=True)
class ToolFunction:
    """A function a tool-call grammar may call."""

    name: str
    """The function's name."""
    parameters: Mapping[str, Any] | None = None
    """JSON schema of its arguments (None: any JSON object)."""
    grammar: str | None = None
    """A grammar-typed custom tool's Lark grammar (llguidance's dialect) over its raw input:
    the call's arguments are then `{"input": <a sentence of it>}`, the input JSON-escaped
    in the call and the grammar applied to it as written (`lark_json`); `parameters` is
    ignored."""


@dataclass(frozen=True)
class Constraint:
    """What a completion must be (see the module docstring). Build it with the class methods."""

    kind: ConstraintKind
    """What it describes."""
    source: str
    """The JSON schema (as JSON text) for the JSON kinds, the Lark grammar otherwise."""

    @classmethod
    def json_schema(cls, schema: Mapping[str, Any]) -> Constraint:
        """A JSON document valid under `schema`."""
        return cls(ConstraintKind.JSON_SCHEMA, json.dumps(schema, sort_keys=False))

    @classmethod
    def json_object(cls) -> Constraint:
        """Any JSON object."""
        return cls(ConstraintKind.JSON_OBJECT, json.dumps({"type": "object"}))

    @classmethod
    def lark(cls, grammar: str) -> Constraint:
        """A Lark grammar (llguidance's dialect: `%json {...}` embeds a JSON schema)."""
        return cls(ConstraintKind.LARK, grammar)

    @classmethod
    def tool_calls(
        cls,
        functions: Sequence[ToolFunction],
        *,
        syntax: ToolCallSyntax = ToolCallSyntax.HERMES,
        name: str | None = None,
        parallel: bool = True,
        optional: bool = False,
    ) -> Constraint:
        """The whole reply is tool calls in `syntax`: one call of `name`, or (`name` None) one
        or more calls of any of `functions` (exactly one when `parallel` is false).

        `optional` (`tool_choice: auto`): the reply may be any text, but once it opens a call
        (the syntax's marker: `<tool_call>`, `[TOOL_CALLS]`, a leading `{`) the call must be
        one of `functions`, arguments valid, a custom tool's input a sentence of its grammar
        (a lazy grammar: the text before the marker is free)."""
        chosen = [f for f in functions if name is None or f.name == name]
        if not chosen:
            raise ConstraintError(f"no function named {name!r} to call")
        many = name is None and parallel
        return cls(ConstraintKind.TOOL_CALLS, tool_call_grammar(chosen, syntax, many, optional))

    @property
    def schema(self) -> Mapping[str, Any] | None:
        """The JSON schema of a JSON kind (None for grammars)."""
        if self.kind in (ConstraintKind.JSON_SCHEMA, ConstraintKind.JSON_OBJECT):
            return json.loads(self.source)
        return None

    def upstream(self) -> UpstreamFields:
        """The request fields that ask an OpenAI-compatible server (vLLM) for the same
        constraint: `response_format` for the JSON kinds, vLLM's `structured_outputs` (a
        Lark grammar) for the others."""
        schema = self.schema
        if schema is not None:
            spec = {"name": "output", "schema": schema, "strict": True}
            return {"response_format": {"type": "json_schema", "json_schema": spec}}
        return {"structured_outputs": {"grammar": self.source}}

    def grammar(self) -> str:
        """The llguidance grammar (raises `ConstraintError` without the library)."""
        matcher = _llguidance().LLMatcher
        if self.kind is ConstraintKind.JSON_SCHEMA or self.kind is ConstraintKind.JSON_OBJECT:
            try:
                return matcher.grammar_from_json_schema(self.source, defaults=dict(JSON_STYLE))
            except ValueError as e:
                raise ConstraintError(f"invalid JSON schema: {e}") from None
        return matcher.grammar_from_lark(self.source)

    def check(self, tokenizer: Any) -> None:
        """Raise `ConstraintError` naming the problem when it cannot be enforced for
        `tokenizer` (a Hugging Face fast tokenizer)."""
        llg = _llguidance()
        error = llg.LLMatcher.validate_grammar(self.grammar(), grammar_tokenizer(tokenizer, ()))
        if error:
            raise ConstraintError(error)


def tool_call_grammar(
    functions: Sequence[ToolFunction], syntax: ToolCallSyntax, many: bool, optional: bool = False
) -> str:
    """A Lark grammar for calls of `functions` in `syntax`: each call is the JSON object
    `{"name": <name>, <key>: <arguments>}` written as `json.dumps` does, the arguments
    valid under the function's schema, or a custom tool's `{"input": ...}` under its grammar.
    `optional`: free text unless a call is opened (see `Constraint.tool_calls`)."""
    key = "parameters" if syntax is ToolCallSyntax.LLAMA3 else "arguments"
    rules = ["body: " + " | ".join(f"call_{i}" for i in range(len(functions)))]
    for i, f in enumerate(functions):
        rules.extend(_call_rules(f"call_{i}", f, key))
    if syntax is ToolCallSyntax.HERMES:
        open_, close = _lit(HermesFormat.OPEN + "\n"), _lit("\n" + HermesFormat.CLOSE)
        if optional:  # free text; a call opened by the marker (a lazy lexeme) is enforced
            rules[:0] = ["start: (head call)* TEXT", f"head[lazy]: /(?s:.*)/ {open_}"]
            rules.append(f"call: body {close}")
        else:
            rules.insert(0, 'start: call ("\\n" call)*' if many else "start: call")
            rules.append(f"call: {open_} body {close}")
    elif syntax is ToolCallSyntax.MISTRAL:
        rest = ' (", " body)*' if many else ""
        if optional:
            rules.insert(0, f'start: TEXT | head body{rest} "]"')
            rules.append(f"head[lazy]: /(?s:.*)/ {_lit(MistralFormat.MARK + ' [')}")
        else:
            rules.insert(0, f'start: {_lit(MistralFormat.MARK + " [")} body{rest} "]"')
    else:
        calls = 'body ("; " body)*' if many else "body"
        rules.insert(0, f"start: NO_CALL | {calls}" if optional else f"start: {calls}")
        rules.append(r"NO_CALL: /(?s:.*)/ & ~/[ \t\r\n]*(\{|<\|python_tag\|>)(?s:.*)/")
    if optional:
        rules.append("TEXT: /(?s:.*)/")
    return "\n".join(rules) + "\n"


def _call_rules(rule: str, f: ToolFunction, key: str) -> list[str]:
    """The rules of one call of `f` (named `rule`): its name and key written as literals,
    then the arguments' JSON schema, or a custom tool's grammar inside the JSON string."""
    head = json.dumps({"name": f.name})[:-1] + f", {json.dumps(key)}: "
    if f.grammar is None:
        schema = {**dict(f.parameters or {"type": "object"}), "x-guidance": JSON_STYLE}
        return [f"{rule}: {_lit(head)} %json {json.dumps(schema)} " + '"}"']
    from skyrl_sdk.agents.engine.lark_json import json_string_grammar

    try:
        inner = json_string_grammar(f.grammar)
    except ValueError as e:
        raise ConstraintError(f"the grammar of custom tool {f.name!r}: {e}") from None
    opening = head + "{" + json.dumps(CUSTOM_INPUT) + ': "'
    return [
        f"{rule}: {_lit(opening)} {rule}_input " + _lit('"}}'),
        f"{rule}_input: %lark {{\n{inner}}}",
    ]


def _lit(text: str) -> str:
    """`text` as a Lark string literal."""
    return json.dumps(text)


def _llguidance() -> Any:
    try:
        import llguidance
        import llguidance.hf
    except ImportError:
        raise ConstraintError(
            f"constrained decoding needs llguidance: pip install 'skyrl-sdk[{EXTRA}]'"
        ) from None
    return llguidance


_TOKENIZERS: dict[tuple[int, tuple[int, ...]], tuple[Any, Any]] = {}
_TOKENIZERS_LOCK = threading.Lock()


def grammar_tokenizer(tokenizer: Any, stop_ids: Sequence[int]) -> Any:
    """llguidance's view of `tokenizer` whose end token is `stop_ids[0]` (the tokenizer's EOS
    when empty), built once per tokenizer (it takes ~0.4 s on a 49k vocabulary)."""
    llg = _llguidance()
    key = (id(tokenizer), tuple(stop_ids[:1]))
    with _TOKENIZERS_LOCK:
        hit = _TOKENIZERS.get(key)
        if hit is None or hit[0] is not tokenizer:
            try:
                built = llg.hf.from_tokenizer(
                    tokenizer, eos_token=stop_ids[0] if stop_ids else None
                )
            except ValueError as e:  # a slow (Python) tokenizer
                raise ConstraintError(f"cannot constrain this tokenizer: {e}") from None
            hit = _TOKENIZERS[key] = (tokenizer, built)
    return hit[1]


class GrammarMatcher:
    """One request's grammar state: the mask of its next token, advanced by each sampled one.

    Stop ids: the grammar's end token is the first of `stop_ids`; whenever it is allowed (the
    grammar accepts), every stop id is, and sampling any of them ends the grammar."""

    def __init__(self, constraint: Constraint, tokenizer: Any, stop_ids: Sequence[int]):
        llg = _llguidance()
        self.constraint = constraint
        """What it enforces."""
        self.stop_ids = tuple(stop_ids) or (tokenizer.eos_token_id,)
        """Ids that end the completion."""
        self._tokenizer = grammar_tokenizer(tokenizer, self.stop_ids)
        self._matcher = llg.LLMatcher(self._tokenizer, constraint.grammar(), log_level=0)
        if self._matcher.is_error():
            raise ConstraintError(self._matcher.get_error())
        self._ended = False

    def allowed(self, vocab_size: int) -> torch.Tensor:
        """Which ids may come next (`[vocab_size]` bools; ids the tokenizer lacks never)."""
        import numpy as np
        import torch

        if self._matcher.is_error():  # cannot happen for tokens it allowed; end the turn
            bits = np.zeros(vocab_size, dtype=bool)
        else:
            raw = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
            bits = np.unpackbits(raw, bitorder="little")[:vocab_size].astype(bool)
            if len(bits) < vocab_size:
                bits = np.concatenate([bits, np.zeros(vocab_size - len(bits), dtype=bool)])
        stops = [i for i in self.stop_ids if i < vocab_size]
        if self._matcher.is_error() or bits[stops[0]]:
            bits[stops] = True
        return torch.from_numpy(bits)

    def advance(self, token: int) -> None:
        """Record the sampled `token` (a stop id counts as the grammar's end token)."""
        if token in self.stop_ids:
            token = self.stop_ids[0]
            self._ended = True
        self._matcher.consume_token(token)

    @property
    def finished(self) -> bool:
        """Whether a stop id was sampled (the mask allows one only where the grammar
        accepts): the completion ends there even when the request names no stop ids."""
        return self._ended

    @property
    def accepting(self) -> bool:
        """Whether the text so far is a complete sentence of the grammar."""
        return self._matcher.is_accepting()
