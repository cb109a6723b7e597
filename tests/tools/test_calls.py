"""Tool calls and parse errors as JSON: round trips, and a malformed object names its field."""

from __future__ import annotations

import dataclasses

import pytest

from skyrl_sdk.tools.calls import ParseError, ParseErrorKind, ToolCall


def test_a_call_round_trips_and_the_read_copies_its_arguments() -> None:
    call = ToolCall("sql", {"query": "SELECT 1"}, "c1")
    data = call.to_json()
    assert data == {"name": "sql", "arguments": {"query": "SELECT 1"}, "id": "c1"}
    again = ToolCall.from_json(data)
    assert again == call
    data["arguments"]["query"] = "DROP"
    assert again.arguments == {"query": "SELECT 1"}
    assert ToolCall.from_json({"name": "answer"}) == ToolCall("answer", {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ([], "must be an object"),
        ({"name": ""}, '"name"'),
        ({"name": 3}, '"name"'),
        ({"name": "f", "arguments": [1]}, '"arguments"'),
        ({"name": "f", "id": 5}, '"id"'),
    ],
)
def test_a_malformed_call_names_the_bad_field(obj: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ToolCall.from_json(obj)


def test_a_parse_error_round_trips_and_an_unknown_kind_lists_the_known() -> None:
    error = ParseError(ParseErrorKind.UNCLOSED_TAG, "close the <sql> tag")
    assert ParseError.from_json(error.to_json()) == error
    with pytest.raises(ValueError, match="known: unclosed_tag, invalid_json"):
        ParseError.from_json({"kind": "nope", "message": "m"})
    with pytest.raises(ValueError, match='"message"'):
        ParseError.from_json({"kind": "no_action", "message": None})
