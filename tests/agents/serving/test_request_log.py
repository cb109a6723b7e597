"""`RequestLog`: the line it writes, for a plain, a refused and a crafted request."""

from __future__ import annotations

import asyncio
from typing import Any

from skyrl_sdk.agents.serving.request_log import RequestLog


def _call(path: str, status: int | None) -> list[str]:
    lines: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if status is not None:
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    async def send(message: dict[str, Any]) -> None:
        pass

    scope = {"type": "http", "method": "POST", "path": path, "client": ("10.0.0.7", 5)}
    asyncio.run(RequestLog(app, write=lines.append)(scope, None, send))
    return lines


def test_one_line_with_address_method_path_status_and_time() -> None:
    (line,) = _call("/v1/completions", 429)
    host, method, path, status, took = line.split(" ")
    assert (host, method, path, status) == ("10.0.0.7", "POST", "/v1/completions", "429")
    assert took.endswith("s") and float(took[:-1]) >= 0


def test_no_response_is_status_dash_and_health_is_not_logged() -> None:
    assert _call("/v1/models", None)[0].split(" ")[3] == "-"
    assert _call("/health", 200) == []


def test_a_crafted_path_cannot_forge_a_second_line() -> None:
    (line,) = _call("/v1/x\n127.0.0.1 GET /admin 200 0.001s", 404)
    assert "\n" not in line and "\\x0a" in line
