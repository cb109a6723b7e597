"""Session URLs and keys: `/sessions/{id}/v1/...` is `/v1/...` within session `id`.

`SessionGate` is ASGI middleware, outermost, so it answers before a byte of the body is read:

- it strips the `/sessions/{id}` prefix (the routes see `/v1/...`) and puts the id in the
  request scope (`scope["skyrl_session"]`);
- a session key (`SessionKeys.issue`) opens only its own session's paths; the server's main
  key (`ServeConfig.api_key`) opens every path; `/health` needs none;
- a session with a key issued needs a key even when the server has no main key, and a path
  without a session needs the main key whenever one is set, so a sandboxed harness given its
  session's URL and key can reach nothing else.

Keys are compared in constant time (`skyrl_sdk.http_guard.key_matches`).
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from skyrl_sdk.agents.serving.budget import DEFAULT_SESSION_TOKEN_BUDGET, TokenBudget
from skyrl_sdk.http_guard import (
    ErrorStyle,
    Refusal,
    error_body,
    key_matches,
    presented_key,
    send_refusal,
)

PREFIX = "/sessions/"
SESSION_SCOPE_KEY = "skyrl_session"
"""Where the session id of a `/sessions/{id}` request is put in the ASGI scope."""
MAX_SESSION_ID = 256
"""Longest session id accepted in a URL."""


class SessionKeys:
    """Bearer keys that each open one session for a token budget (thread-safe)."""

    def __init__(self, default_budget: int | None = DEFAULT_SESSION_TOKEN_BUDGET) -> None:
        self.default_budget = default_budget or None
        """Tokens a new key opens unless `issue` says otherwise (None: no budget)."""
        self._keys: dict[str, str] = {}
        self._budgets: dict[str, TokenBudget] = {}
        self._lock = threading.Lock()

    def issue(self, session_id: str, token_budget: int | None = None) -> str:
        """A new key for `session_id` (replacing an earlier one, and its budget) that opens
        `token_budget` tokens (None: `default_budget`; 0: no budget; see `budget`)."""
        key = "sk-session-" + secrets.token_urlsafe(24)
        limit = self.default_budget if token_budget is None else token_budget or None
        if limit is not None and limit < 1:
            raise ValueError(f"token_budget must be >= 0, got {token_budget}")
        with self._lock:
            self._keys[session_id] = key
            if limit is None:
                self._budgets.pop(session_id, None)
            else:
                self._budgets[session_id] = TokenBudget(limit)
        return key

    def revoke(self, session_id: str) -> None:
        """Forget the session's key (and its budget): its URL then needs the main key."""
        with self._lock:
            self._keys.pop(session_id, None)
            self._budgets.pop(session_id, None)

    def budget(self, session_id: str) -> TokenBudget | None:
        """The token budget of the session's key (None: no key, or no budget)."""
        with self._lock:
            return self._budgets.get(session_id)

    def get(self, session_id: str) -> str | None:
        """The session's key, if one was issued."""
        with self._lock:
            return self._keys.get(session_id)


class SessionGate:
    """ASGI middleware: session prefix and keys (see the module docstring)."""

    def __init__(
        self, app: Any, *, api_key: str | None, keys: SessionKeys, open_paths: frozenset[str]
    ):
        self.app = app
        self.api_key = api_key or None
        self.keys = keys
        self.open_paths = open_paths

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        session = None
        if path.startswith(PREFIX):
            session, slash, rest = path[len(PREFIX) :].partition("/")
            if not session or not slash or len(session) > MAX_SESSION_ID:
                await _refuse(send, 404, "no such path: a session URL is /sessions/{id}/v1", None)
                return
            scope = dict(scope)
            scope["path"] = "/" + rest
            scope["raw_path"] = scope["path"].encode()
            scope[SESSION_SCOPE_KEY] = session
        elif path in self.open_paths:
            await self.app(scope, receive, send)
            return
        presented = presented_key(scope.get("headers", ()))
        refusal = self._refusal(session, presented)
        if refusal is not None:
            await _refuse(send, 401, _MESSAGES[refusal], refusal)
            return
        await self.app(scope, receive, send)

    def _refusal(self, session: str | None, presented: bytes | None) -> Refusal | None:
        needed = [k for k in (self.api_key, self.keys.get(session) if session else None) if k]
        if not needed:
            return None
        if presented is None:
            return Refusal.MISSING_KEY
        if any(key_matches(presented, k) for k in needed):
            return None
        return Refusal.WRONG_KEY


_MESSAGES = {
    Refusal.MISSING_KEY: (
        "this server requires an API key: send it as 'Authorization: Bearer KEY' "
        "or 'X-API-Key: KEY' (Anthropic clients)"
    ),
    Refusal.WRONG_KEY: "invalid API key (a session key opens only its own session's URL)",
}


async def _refuse(send: Any, status: int, message: str, refusal: Refusal | None) -> None:
    if refusal is not None:
        body = error_body(ErrorStyle.OPENAI, refusal, message)
    else:
        import json

        body = json.dumps(
            {"error": {"message": message, "type": "not_found_error", "param": None, "code": None}}
        ).encode()
    await send_refusal(send, status, body)
