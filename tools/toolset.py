"""A `Toolset` checks parsed calls against tool schemas and runs them without ever raising."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterable

from skyrl_sdk.tools.calls import ParseError, ParseErrorKind, ToolCall, ToolResult
from skyrl_sdk.tools.core import Tool, ToolArgumentError


class Toolset:
    """The tools one env offers, by name."""

    def __init__(self, tools: Iterable[Tool], max_output_chars: int = 16_000):
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.max_output_chars = max_output_chars

    def __iter__(self):
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    def check(self, call: ToolCall) -> ParseError | None:
        """A `ParseError` if the call names an unknown tool or has bad arguments."""
        known = self.tools.get(call.name)
        if known is None:
            names = ", ".join(sorted(self.tools)) or "none"
            return ParseError(
                ParseErrorKind.UNKNOWN_TOOL, f"there is no tool named {call.name!r}; tools: {names}"
            )
        try:
            known.check_arguments(call.arguments)
        except ToolArgumentError as e:
            return ParseError(ParseErrorKind.BAD_ARGUMENTS, str(e))
        return None

    def execute(self, call: ToolCall) -> ToolResult:
        """Run a call. Schema errors and exceptions become an error result, never an exception."""
        problem = self.check(call)
        if problem is not None:
            return ToolResult(call, f"Error: {problem.message}", is_error=True)
        if inspect.iscoroutinefunction(self.tools[call.name].fn):
            raise TypeError(
                f"tool {call.name!r} is async: run it with `await toolset.aexecute(call)`"
            )
        try:
            output = self.tools[call.name](**call.arguments)
        except Exception as e:  # a tool's failure is the model's information, not a crash
            return ToolResult(call, f"Error: {type(e).__name__}: {e}", is_error=True)
        return ToolResult(call, self._cap(output))

    async def aexecute(self, call: ToolCall) -> ToolResult:
        """Async `execute`: awaits coroutine tools, runs sync ones in a worker thread."""
        problem = self.check(call)
        if problem is not None:
            return ToolResult(call, f"Error: {problem.message}", is_error=True)
        fn = self.tools[call.name].fn
        try:
            if inspect.iscoroutinefunction(fn):
                output = await fn(**call.arguments)
            else:
                output = await asyncio.to_thread(fn, **call.arguments)
        except Exception as e:
            return ToolResult(call, f"Error: {type(e).__name__}: {e}", is_error=True)
        return ToolResult(call, self._cap(output))

    def _cap(self, output: object) -> str:
        text = output if isinstance(output, str) else str(output)
        if len(text) > self.max_output_chars:
            dropped = len(text) - self.max_output_chars
            text = text[: self.max_output_chars] + f"\n... [truncated {dropped} characters]"
        return text
