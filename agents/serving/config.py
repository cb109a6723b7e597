"""`ServeConfig`: how `skyrl serve` (or an in-process server) listens, authenticates, captures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skyrl_sdk.agents.serving.budget import DEFAULT_SESSION_TOKEN_BUDGET
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat
from skyrl_sdk.http_guard import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES

DEFAULT_MAX_STORED_RESPONSES = 4096
"""Responses the Responses API keeps for `previous_response_id` and `GET /v1/responses/{id}`."""

DEFAULT_MAX_TOKENS = 4096
"""Tokens per reply when a request sets no limit and the policy has no context length."""


@dataclass(frozen=True)
class ServeConfig:
    """Server settings."""

    host: str = "127.0.0.1"
    """Interface to bind; a non-loopback one needs `api_key`."""
    port: int = 0
    """TCP port (0: pick a free one; `RunningServer.base_url` tells which)."""
    api_key: str | None = None
    """The key every path but `/health` accepts (None: no key needed where no session key was
    issued). Set one to make session keys the only way into a session."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Larger request bodies get 413 unread."""
    capture_dir: Path | None = None
    """Write each session's trajectory to `DIR/<session>.jsonl` (None: keep them in memory)."""
    model_name: str = "tiny"
    """The model id clients must name."""
    tool_format: ToolOutputFormat = ToolOutputFormat.AUTO
    """How tool calls are read from the model's replies."""
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    """Reply length when a request gives none and the policy has no context limit."""
    session_token_budget: int | None = DEFAULT_SESSION_TOKEN_BUDGET
    """Tokens (prompt + generated) a session key opens unless `issue_session_key` says
    otherwise; past it, 429 (see `budget`). None or 0: no budget."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """A connection must send a whole request head within this many seconds of opening (or
    of its previous response), else it is closed (`http_guard.header_timeout_protocol`)."""
    max_stored_responses: int = DEFAULT_MAX_STORED_RESPONSES
    """Responses kept for `previous_response_id` and `GET`/`DELETE /v1/responses/{id}`
    (least recently used evicted first; `store: false` ones are not kept)."""
    log_requests: bool = False
    """Write one line per request to stderr (`request_log.RequestLog`): `skyrl serve` does
    unless `--quiet`; in-process servers (training, tests) do not."""
