"""Tools the model can call, their JSON schemas, and the formats tool calls are written in."""

from skyrl_sdk.tools.calls import ParsedAction, ParseError, ParseErrorKind, ToolCall, ToolResult
from skyrl_sdk.tools.core import Tool, ToolArgumentError, ToolDefinitionError, tool
from skyrl_sdk.tools.formats import (
    FORMATS,
    CallPattern,
    HermesFormat,
    Llama3JSONFormat,
    MistralFormat,
    OpenAIFormat,
    PatternFormat,
    ToolFormat,
    XMLTagFormat,
)
from skyrl_sdk.tools.messages import Message, Messages, is_message
from skyrl_sdk.tools.toolset import Toolset

__all__ = [
    "FORMATS",
    "CallPattern",
    "HermesFormat",
    "Llama3JSONFormat",
    "Message",
    "Messages",
    "MistralFormat",
    "OpenAIFormat",
    "ParseError",
    "ParseErrorKind",
    "ParsedAction",
    "PatternFormat",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolDefinitionError",
    "ToolFormat",
    "ToolResult",
    "Toolset",
    "XMLTagFormat",
    "is_message",
    "tool",
]
