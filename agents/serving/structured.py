"""Structured outputs and forced tool calls for every route: wire fields to a `Constraint`.

- `response_format_constraint`: chat completions' `response_format` (`text`, `json_object`,
  `json_schema`) as a constraint (None for `text`).
- `tool_choice_constraint`: a forcing `tool_choice` (`required`, or one named function) as a
  tool-call grammar in the served model's tool-call syntax, each function's `parameters`
  schema embedded; `auto` and `none` force nothing.
- `structured_outputs_constraint`: vLLM's `structured_outputs` (`json`, `grammar`), which
  `/v1/completions` honours (an upstream `skyrl serve` behind `OpenAIClient` gets them so).
- `constrain`: a plan's sampling with the constraint on it, after checking that the policy can
  enforce it (`supports_constraints`) and that the grammar compiles for its tokenizer;
  anything else is a 400 naming the field, never a silently ignored constraint.

The Responses and Messages routes call the same three functions for their `tool_choice`
(and `text.format`), passing their own field names as `param`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skyrl_sdk.agents.engine.constraints import (
    Constraint,
    ConstraintError,
    ToolCallSyntax,
    ToolFunction,
)
from skyrl_sdk.agents.serving.protocol import ApiError
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat

if TYPE_CHECKING:
    from skyrl_sdk.agents.policy import Policy, SamplingParams

SYNTAX = {
    ToolOutputFormat.AUTO: ToolCallSyntax.HERMES,  # the chat templates' common syntax
    ToolOutputFormat.HERMES: ToolCallSyntax.HERMES,
    ToolOutputFormat.MISTRAL: ToolCallSyntax.MISTRAL,
    ToolOutputFormat.LLAMA3: ToolCallSyntax.LLAMA3,
}
"""The syntax a forced tool call is written in, per server tool format."""

FORCED_FORMAT = {
    ToolCallSyntax.HERMES: ToolOutputFormat.HERMES,
    ToolCallSyntax.MISTRAL: ToolOutputFormat.MISTRAL,
    ToolCallSyntax.LLAMA3: ToolOutputFormat.LLAMA3,
}
"""How a forced reply is parsed back (the syntax its grammar wrote)."""


def response_format_constraint(
    response_format: Mapping[str, Any] | None, *, param: str = "response_format"
) -> Constraint | None:
    """OpenAI's `response_format` as a constraint (None: `text` or absent)."""
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return Constraint.json_object()
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise ApiError(
                400,
                "response_format json_schema needs a 'schema' object",
                param=f"{param}.json_schema",
            )
        return Constraint.json_schema(schema)
    raise ApiError(
        400,
        f"response_format type {kind!r} is not supported (text, json_object, json_schema)",
        param=f"{param}.type",
    )


def structured_outputs_constraint(
    spec: Mapping[str, Any] | None, *, param: str = "structured_outputs"
) -> Constraint | None:
    """vLLM's `structured_outputs` (`{"json": schema}` or `{"grammar": lark}`) as a
    constraint (what `Constraint.upstream` sends); other kinds are a 400 naming them."""
    if not spec:
        return None
    unknown = sorted(set(spec) - {"json", "grammar"})
    if unknown or len(spec) != 1:
        raise ApiError(
            400,
            f"structured_outputs takes one of json, grammar (got {', '.join(sorted(spec))})",
            param=f"{param}.{unknown[0]}" if unknown else param,
        )
    if "grammar" in spec:
        if not isinstance(spec["grammar"], str):
            raise ApiError(
                400, "structured_outputs.grammar must be a string", param=f"{param}.grammar"
            )
        return Constraint.lark(spec["grammar"])
    schema = spec["json"]
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError:
            schema = None
    if not isinstance(schema, Mapping):
        raise ApiError(400, "structured_outputs.json must be a JSON schema", param=f"{param}.json")
    return Constraint.json_schema(schema)


def tool_choice_constraint(
    functions: Sequence[ToolFunction],
    choice: str | None,
    tool_format: ToolOutputFormat,
    *,
    parallel: bool = True,
) -> Constraint | None:
    """A forcing tool choice as a tool-call grammar: `choice` is `required` (any function,
    one or more calls unless not `parallel`) or a function's name (one call of it); `auto`,
    `none` and None force nothing."""
    if choice in (None, "auto", "none"):
        return None
    name = None if choice == "required" else choice
    return Constraint.tool_calls(
        functions, syntax=SYNTAX[tool_format], name=name, parallel=parallel
    )


def constrain(
    policy: Policy,
    tokenizer: Any,
    sampling: SamplingParams,
    constraint: Constraint | None,
    *,
    param: str,
) -> SamplingParams:
    """`sampling` with `constraint` on it; `ApiError` 400 naming `param` when the policy
    cannot enforce it or the grammar does not compile (an unsupported schema keyword)."""
    if constraint is None:
        return sampling
    if not getattr(policy, "supports_constraints", False):
        raise ApiError(
            400,
            f"{param} cannot be enforced: the served policy ({type(policy).__name__}) "
            "has no constrained decoding",
            param=param,
        )
    upstream = getattr(policy, "passes_constraints_through", False)
    if tokenizer is not None:
        try:
            constraint.check(tokenizer)
        except ConstraintError as e:
            # An upstream server checks its own grammars; without the library here, let it.
            if not (upstream and "needs llguidance" in str(e)):
                raise ApiError(400, f"{param} cannot be enforced: {e}", param=param) from None
    return replace(sampling, constraint=constraint)
