"""@tool: JSON schemas from type hints and docstrings; argument validation."""

import enum
from typing import Literal

import pytest

from skyrl_sdk.tools import Tool, ToolArgumentError, ToolDefinitionError, tool


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@tool
def search(
    query: str, limit: int = 5, exact: bool | None = None, tags: list[str] | None = None
) -> str:
    """Search the corpus.

    Longer explanation that is not part of the summary.

    Args:
        query: What to look for.
        limit: How many hits to return,
            at most 50.
        exact: Match whole words only.
        tags: Only documents with these tags.

    Returns:
        The hits, one per line.
    """
    return f"{query}:{limit}:{exact}:{tags}"


def test_schema_from_hints_and_docstring():
    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search the corpus."
    props = search.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {
        "type": "integer",
        "description": "How many hits to return, at most 50.",
        "default": 5,
    }
    assert props["exact"]["type"] == "boolean"
    assert props["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Only documents with these tags.",
        "default": None,
    }
    assert search.parameters["required"] == ["query"]
    assert search(query="x", limit=2) == "x:2:None:None"


def test_openai_schema_shape():
    schema = search.openai_schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "search"
    assert schema["function"]["parameters"]["type"] == "object"


def test_literal_enum_float_dict_and_renaming():
    @tool(name="paint", description="Paint it.")
    def paint_thing(
        color: Color, finish: Literal["matte", "gloss"], opacity: float, extra: dict
    ) -> str:
        return f"{color}{finish}{opacity}{extra}"

    props = paint_thing.parameters["properties"]
    assert paint_thing.name == "paint" and paint_thing.description == "Paint it."
    assert props["color"] == {"enum": ["red", "blue"]}
    assert props["finish"] == {"enum": ["matte", "gloss"]}
    assert props["opacity"] == {"type": "number"}
    assert props["extra"] == {"type": "object"}


def test_method_tools_bind_to_their_instance():
    class Counter:
        def __init__(self):
            self.n = 0

        @tool
        def add(self, k: int) -> int:
            """Add k."""
            self.n += k
            return self.n

    a, b = Counter(), Counter()
    assert "self" not in Counter.add.parameters["properties"]
    assert a.add(k=2) == 2 and a.add(k=3) == 5
    assert b.add(k=1) == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing required argument"),
        ({"query": "x", "bogus": 1}, "unknown argument"),
        ({"query": 3}, "'query' must be of type string, got int"),
        ({"query": "x", "limit": True}, "'limit' must be of type integer, got bool"),
        ({"query": "x", "tags": ["a", 2]}, "has an item that must be of type string"),
    ],
)
def test_argument_validation_messages(arguments, message):
    with pytest.raises(ToolArgumentError, match=message):
        search.check_arguments(arguments)


def test_none_is_accepted_for_optional_parameters():
    search.check_arguments({"query": "x", "exact": None, "tags": None})


def test_definition_errors_are_specific():
    def untyped(x):
        return x

    with pytest.raises(ToolDefinitionError, match="parameter 'x' needs a type hint"):
        tool(untyped)

    def variadic(*args: int) -> None: ...

    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        tool(variadic)

    def weird(x: complex) -> None: ...

    with pytest.raises(ToolDefinitionError, match="no JSON schema mapping"):
        tool(weird)
