"""The wire format of `skyrl serve`: request bodies, OpenAI's error shape, response pieces.

Request models accept (and ignore) fields they do not know, as OpenAI-compatible servers do;
the fields they do know are validated, and a bad value is a 400 naming the field
(`ApiError.param`), in the `{"error": {"message", "type", "param", "code"}}` body that the
`openai` SDK turns into its typed exceptions (`BadRequestError`, `NotFoundError`, ...).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from skyrl_sdk.sampling_limits import MAX_STOP_TOKEN_IDS, stop_problem

MAX_N = 16
"""Most choices one request may ask for."""
MAX_STOP = 4
"""Most stop strings one request may give (OpenAI's limit)."""
MAX_TOP_LOGPROBS = 20
"""Most alternatives per token (OpenAI's limit)."""
MAX_SEED = 2**63 - 1
"""Largest seed accepted (a torch generator's seed range)."""


def check_stop(value: str | list[str] | None) -> str | list[str] | None:
    """A request's `stop` (a string or a list), checked: at most `MAX_STOP` strings within the
    length cap, none empty. Raises `ValueError` (pydantic reports it as the field's error)."""
    stops = [value] if isinstance(value, str) else value or []
    problem = stop_problem(stops, (), max_strings=MAX_STOP)
    if problem is not None:
        raise ValueError(problem)
    if any(not s for s in stops):
        raise ValueError("stop strings must not be empty")
    return value


def stop_tuple(value: str | list[str] | None) -> tuple[str, ...]:
    """A request's `stop` as a tuple of strings."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


class ApiError(Exception):
    """An error answered in OpenAI's shape with its status code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        """HTTP status code."""
        self.message = message
        """One sentence saying what was wrong (shown by the SDK)."""
        self.param = param
        """The request field at fault, dotted (`messages.0.role`), or None."""
        self.code = code
        """A machine-readable code (`model_not_found`, `context_length_exceeded`)."""
        self.kind = kind or _KINDS.get(status, "invalid_request_error")
        """OpenAI's error `type`."""

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


_KINDS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


def parse_body(raw: bytes, model: type[BaseModel]) -> Any:
    """`raw` JSON validated as `model`; `ApiError` 400 naming the first bad field."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"]
        if first["type"] == "missing":
            message = f"missing required parameter '{param}'"
        else:
            message = f"invalid '{param}': {message}"
        raise ApiError(400, message, param=param, code="invalid_value") from None


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Body):
    """`stream_options`."""

    include_usage: bool = False
    """Send a last chunk with `usage` and no choices."""


class FunctionSpec(_Body):
    """A tool's function: name, description, JSON-schema parameters."""

    name: str = Field(min_length=1, max_length=256)
    """The function's name."""
    description: str | None = None
    """What it does (shown to the model by the chat template)."""
    parameters: dict[str, Any] | None = None
    """JSON schema of its arguments."""


class ToolSpec(_Body):
    """One entry of `tools`."""

    type: Literal["function"] = "function"
    """Only functions exist."""
    function: FunctionSpec
    """The function offered."""


class _Sampling(_Body):
    """Fields shared by chat and completions requests."""

    model: str = Field(min_length=1)
    """The served model's name (OpenAI requires it)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens to generate (default: whatever the context leaves)."""
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    """Softmax temperature; 0 is greedy."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus mass."""
    top_k: int = Field(default=0, ge=0)
    """vLLM extension: keep the k most likely tokens (0: off)."""
    n: int = Field(default=1, ge=1, le=MAX_N)
    """Choices to generate (each its own sample; with a seed, seeds seed, seed+1, ...)."""
    stop: str | list[str] | None = None
    """Up to 4 stop strings, excluded from the returned text."""
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    """Sampler seed: same request, same seed, same tokens (streamed or not, batched or not)."""
    stream: bool = False
    """Answer as server-sent events."""
    stream_options: StreamOptions | None = None
    """Streaming options."""
    user: str | None = Field(default=None, max_length=256)
    """The caller's end-user id; `skyrl serve` groups captured turns by it."""
    return_token_ids: bool = False
    """vLLM extension: also return `prompt_token_ids` and each choice's `token_ids`."""

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_stop(value)

    def stops(self) -> tuple[str, ...]:
        """`stop` as a tuple."""
        return stop_tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk."""
        return self.stream_options is not None and self.stream_options.include_usage


class ChatRequest(_Sampling):
    """`POST /v1/chat/completions`."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    """The conversation (at least one message)."""
    max_completion_tokens: int | None = Field(default=None, ge=1)
    """OpenAI's newer name for `max_tokens` (wins when both are given)."""
    tools: list[ToolSpec] | None = None
    """Functions the model may call (rendered by the chat template, parsed from the reply)."""
    tool_choice: str | dict[str, Any] | None = None
    """`none` (do not parse calls), `auto`, `required`, or a named function."""
    logprobs: bool = False
    """Return each sampled token's logprob."""
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    """Also return this many most likely alternatives per token (needs `logprobs`)."""
    parallel_tool_calls: bool | None = None
    """False: a forced tool choice (`required`) makes exactly one call; otherwise a reply
    may hold several calls."""
    response_format: dict[str, Any] | None = None
    """`{"type": "text" | "json_object" | "json_schema", ...}`: JSON output enforced by
    constrained decoding (`structured`), or a 400 when it cannot be."""

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(value, str) and value not in ("none", "auto", "required"):
            raise ValueError("must be 'none', 'auto', 'required' or a function")
        return value

    def token_limit(self) -> int | None:
        """`max_completion_tokens`, else `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    """`POST /v1/completions` (OpenAI fields plus vLLM's token-id extensions)."""

    prompt: str | list[int] = Field(min_length=1)
    """Text, or token ids (vLLM); a list of prompts is not supported."""
    logprobs: int | None = Field(default=None, ge=0, le=5)
    """Return sampled tokens' logprobs and this many alternatives each."""
    echo: bool = False
    """Not supported (400 when true)."""
    stop_token_ids: list[int] = Field(default_factory=list, max_length=MAX_STOP_TOKEN_IDS)
    """vLLM extension: ids that end the completion (at most `MAX_STOP_TOKEN_IDS`)."""
    response_format: dict[str, Any] | None = None
    """As chat's: JSON output enforced by constrained decoding (`structured`)."""
    structured_outputs: dict[str, Any] | None = None
    """vLLM extension: `{"json": schema}` or `{"grammar": lark}`, enforced likewise."""

    def token_limit(self) -> int | None:
        """`max_tokens`."""
        return self.max_tokens


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's `usage` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
