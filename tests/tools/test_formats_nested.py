"""The default XML tag format with tools of several arguments: each is a child tag."""

from __future__ import annotations

from skyrl_sdk.tools import tool
from skyrl_sdk.tools.calls import ToolCall
from skyrl_sdk.tools.formats import XMLTagFormat


@tool
def move(x: int, y: int, label: str) -> str:
    """Move a point.

    Args:
        x: Column.
        y: Row.
        label: Its name.
    """
    return f"{label} at {x},{y}"


@tool
def lookup(item: str) -> str:
    """Look up an item.

    Args:
        item: The item.
    """
    return item


FMT = XMLTagFormat.for_tools([move, lookup])


def test_children_are_arguments_typed_by_the_schema():
    parsed = FMT.parse(
        "go <move><x>3</x> <y>-4</y><label> a b </label></move> then <lookup>pen</lookup>"
    )
    assert parsed.tool_calls == [
        ToolCall("move", {"x": 3, "y": -4, "label": "a b"}),
        ToolCall("lookup", {"item": "pen"}),
    ]
    assert parsed.error is None


def test_a_child_that_does_not_parse_as_its_type_stays_text_and_a_missing_one_is_absent():
    (call,) = FMT.parse("<move><x>three</x><label>p</label></move>").tool_calls
    assert call.arguments == {"x": "three", "label": "p"}  # the schema check reports both


def test_round_trip_and_instructions():
    call = ToolCall("move", {"x": 1, "y": 2, "label": "p"})
    assert FMT.parse(FMT.render_call(call)).tool_calls == [call]
    text = FMT.instructions([move, lookup])
    assert "<move><x>x</x><y>y</y><label>label</label></move>" in text
    assert "<lookup>item</lookup>" in text
