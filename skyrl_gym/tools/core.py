"""SkyRL's tool groups: methods marked `@tool` on a `ToolGroup`, called by name.

A SkyRL env keeps its groups with `BaseTextEnv.init_tool_groups([...])` and runs a tool with
`self._execute_tool(group_name, tool_name, args)`. A group holds state its tools share (a
database path, an HTTP session). Tools carry no schema: the env parses its own action format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ToolGroup", "tool"]


class tool:  # SkyRL's name: lower case, as a decorator
    """Marks a `ToolGroup` method as a tool named after the function."""

    def __init__(self, func: Callable[..., Any]):
        self.func = func
        self.name: str = func.__name__

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self  # on the class: the marker itself, so groups can find their tools
        func = self.func
        return lambda *args, **kwargs: func(instance, *args, **kwargs)


class ToolGroup:
    """A named set of `@tool` methods; tool names must be unique across an env's groups."""

    def __init__(self, name: str):
        self.name = name
        self._tools: dict[str, Callable[..., Any]] = {}
        for cls in reversed(type(self).__mro__):  # subclasses override their bases' tools
            for attr, value in vars(cls).items():
                if isinstance(value, tool):
                    self._tools[value.name] = getattr(self, attr)

    def get_name(self) -> str:
        """The group's name (what `_execute_tool` looks groups up by)."""
        return self.name

    def get_tool(self, name: str) -> Callable[..., Any] | None:
        """The bound tool called `name`, or None."""
        return self._tools.get(name)

    def get_tool_names(self) -> list[str]:
        """Every tool name in this group."""
        return list(self._tools)

    def execute_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call tool `name`; `ValueError` naming the group when there is none."""
        func = self._tools.get(name)
        if func is None:
            raise ValueError(f"tool {name!r} not found in group {self.name!r}")
        return func(*args, **kwargs)

    def get_tool_to_group_mapping(self) -> dict[str, str]:
        """`{tool name: this group's name}`, for `BaseTextEnv.init_tool_groups`."""
        return dict.fromkeys(self._tools, self.name)
