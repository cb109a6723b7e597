"""What counts as a chat message: a known role and string fields only."""

from __future__ import annotations

import pytest

from skyrl_sdk.tools.messages import ROLES, is_message


@pytest.mark.parametrize("role", sorted(ROLES))
def test_every_role_with_string_fields_is_a_message(role: str) -> None:
    assert is_message({"role": role, "content": "hi"})
    assert is_message({"role": role, "content": "", "name": "sql", "tool_call_id": "c1"})


@pytest.mark.parametrize(
    "value",
    [
        {"role": "robot", "content": "hi"},
        {"role": "user"},
        {"role": "user", "content": None},
        {"role": "user", "content": ["parts"]},
        {"role": "user", "content": "hi", "name": 3},
        {"role": "user", "content": "hi", 1: "x"},
        [("role", "user"), ("content", "hi")],
        "user: hi",
    ],
)
def test_anything_else_is_not(value: object) -> None:
    assert not is_message(value)
