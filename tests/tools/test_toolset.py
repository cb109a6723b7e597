"""`Toolset`: every failure is an error result, async runs match sync, names are unique."""

import pytest

from skyrl_sdk.tools import ToolCall, Toolset, tool


@tool
def explode(x: int) -> str:
    """Always fails."""
    raise RuntimeError(f"boom {x}")


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


def test_toolset_turns_every_failure_into_an_error_result():
    tools = Toolset([explode, echo], max_output_chars=10)
    assert tools.execute(ToolCall("explode", {"x": 1})).output == "Error: RuntimeError: boom 1"
    unknown = tools.execute(ToolCall("nope", {}))
    assert (
        unknown.is_error
        and "no tool named 'nope'" in unknown.output
        and "echo, explode" in unknown.output
    )
    assert tools.execute(ToolCall("echo", {"text": 5})).is_error
    long = tools.execute(ToolCall("echo", {"text": "y" * 50}))
    assert long.output.startswith("y" * 10) and "[truncated 40 characters]" in long.output


def test_toolset_async_execution_matches_sync():
    import asyncio

    tools = Toolset([explode, echo])
    result = asyncio.run(tools.aexecute(ToolCall("echo", {"text": "hi"})))
    assert result.output == "hi" and not result.is_error
    assert asyncio.run(tools.aexecute(ToolCall("explode", {"x": 2}))).is_error


def test_toolset_rejects_duplicate_names():
    with pytest.raises(ValueError, match="two tools are named 'echo'"):
        Toolset([echo, echo])
