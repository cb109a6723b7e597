"""`@tool`: a typed Python function becomes a `Tool` with a JSON schema.

The schema comes from the type hints, the docstring's first paragraph becomes the description,
and a Google-style `Args:` section describes each parameter. `@tool` works on plain functions
and on methods (the tool binds to the instance it is read from).
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Union, get_args, get_origin

JsonSchema = dict[str, Any]


class ToolDefinitionError(TypeError):
    """A function cannot be turned into a tool (missing or unsupported type hints)."""


class ToolArgumentError(ValueError):
    """Arguments given to a tool do not match its schema."""


@dataclass(frozen=True)
class Tool:
    """A callable the model may invoke, with the JSON schema of its arguments."""

    name: str
    """Name the model uses to call it."""
    description: str
    """What it does, shown to the model."""
    parameters: JsonSchema
    """JSON schema (`type: object`) of the keyword arguments."""
    fn: Callable[..., Any]
    """The implementation, called with keyword arguments."""

    def __call__(self, **arguments: Any) -> Any:
        return self.fn(**arguments)

    def __get__(self, instance: object, owner: type | None = None) -> Tool:
        # Used as a method decorator: bind to the instance, like a function would.
        if instance is None:
            return self
        return replace(self, fn=types.MethodType(self.fn, instance))

    def openai_schema(self) -> JsonSchema:
        """The OpenAI `tools=[...]` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def check_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate arguments against the schema; return them with defaults left to Python."""
        props: dict[str, JsonSchema] = self.parameters.get("properties", {})
        unknown = sorted(k for k in arguments if k not in props)
        if unknown:
            raise ToolArgumentError(
                f"{self.name}: unknown argument(s) {', '.join(unknown)}; expected {', '.join(props) or 'none'}"
            )
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        if missing:
            raise ToolArgumentError(
                f"{self.name}: missing required argument(s) {', '.join(missing)}"
            )
        for key, value in arguments.items():
            problem = _type_problem(value, props[key])
            if problem:
                raise ToolArgumentError(f"{self.name}: argument {key!r} {problem}")
        return dict(arguments)


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Decorator: build a `Tool` from a typed function or method.

    Usage: `@tool` or `@tool(name="sql")`. Every parameter (except `self`) needs a type hint.
    """

    def build(f: Callable[..., Any]) -> Tool:
        doc = inspect.getdoc(f) or ""
        summary, arg_docs = _parse_docstring(doc)
        return Tool(
            name=name or f.__name__,
            description=description if description is not None else summary,
            parameters=_parameters_schema(f, arg_docs),
            fn=f,
        )

    return build(fn) if fn is not None else build


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (summary paragraph, {arg: description})."""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line.strip()):
            break
        summary_lines.append(line.strip())
    args: dict[str, str] = {}
    in_args, current = False, None
    for line in lines:
        if _ARGS_HEADER.match(line.strip()):
            in_args = True
            continue
        if not in_args:
            continue
        if line.strip() and not line[:1].isspace():
            break  # next section ("Returns:", ...)
        match = _ARG_LINE.match(line)
        if match and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = match.group(1).lstrip("*")
            args[current] = match.group(2).strip()
        elif current and line.strip():
            args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(summary_lines), args


def _parameters_schema(fn: Callable[..., Any], arg_docs: dict[str, str]) -> JsonSchema:
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:
        raise ToolDefinitionError(f"{fn.__qualname__}: cannot resolve type hints ({e})") from e
    properties: dict[str, JsonSchema] = {}
    required: list[str] = []
    for index, param in enumerate(inspect.signature(fn).parameters.values()):
        if index == 0 and param.name in ("self", "cls"):
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{fn.__qualname__}: *args/**kwargs cannot be described to a model"
            )
        if param.name not in hints:
            raise ToolDefinitionError(
                f"{fn.__qualname__}: parameter {param.name!r} needs a type hint"
            )
        schema, optional = _type_schema(hints[param.name], f"{fn.__qualname__}.{param.name}")
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        if param.default is not param.empty:
            if param.default is None or isinstance(param.default, str | int | float | bool):
                schema["default"] = param.default
        elif not optional:
            required.append(param.name)
        properties[param.name] = schema
    return {"type": "object", "properties": properties, "required": required}


_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(hint: Any, where: str) -> tuple[JsonSchema, bool]:
    """JSON schema for a type hint, and whether the hint admits None."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not type(None)]
        optional = len(members) < len(get_args(hint))
        if len(members) == 1:
            return _type_schema(members[0], where)[0], optional
        return {"anyOf": [_type_schema(m, where)[0] for m in members]}, optional
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}, False
    if origin is Literal:
        return {"enum": list(get_args(hint))}, False
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}, False
    if hint in (list, tuple) or origin in (list, tuple, typing.Sequence):
        args = get_args(hint)
        schema: JsonSchema = {"type": "array"}
        if args and args[-1] is not Ellipsis:
            schema["items"] = _type_schema(args[0], where)[0]
        return schema, False
    if hint is dict or origin in (dict, typing.Mapping):
        return {"type": "object"}, False
    if hint is Any:
        return {}, False
    raise ToolDefinitionError(f"{where}: type {hint!r} has no JSON schema mapping")


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _type_problem(value: Any, schema: JsonSchema) -> str | None:
    """Why `value` does not fit `schema` (a small subset of JSON schema), or None."""
    if "anyOf" in schema:
        ok = any(_type_problem(value, s) is None for s in schema["anyOf"])
        return None if ok else "matches none of the allowed types"
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {schema['enum']}, got {value!r}"
    kind = schema.get("type")
    if kind is None or (value is None and schema.get("default", 0) is None):
        return None
    if not _TYPE_CHECKS[kind](value):
        return f"must be of type {kind}, got {type(value).__name__}"
    if kind == "array" and "items" in schema:
        for item in value:
            problem = _type_problem(item, schema["items"])
            if problem:
                return f"has an item that {problem}"
    return None
