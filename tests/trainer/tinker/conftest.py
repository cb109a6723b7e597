"""A real uvicorn server for the Tinker API on 127.0.0.1 (random port), in a thread.

It requires an API key, so every test also checks that the `tinker` SDK's key reaches it."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")

API_KEY = "tml-local-test"
"""The key the session's server requires (the `tinker` SDK wants the `tml-` prefix)."""
AUTH = {"X-API-Key": API_KEY}
"""Headers for raw HTTP requests to the server (the SDK sends its key the same way)."""


@dataclass(frozen=True)
class TinkerServer:
    """A running server: its base URL and the served tiny model's name."""

    base_url: str
    base_model: str
    state_dir: Path
    service: Any
    """The server's `TinkerService` (same process), for checks the API does not expose."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tinker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerServer]:
    """Start the server once for the session; stop it at the end."""
    from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models
    from skyrl_sdk.trainer.tinker.server import ServerConfig, ServerThread

    os.environ["TINKER_TELEMETRY"] = "0"
    state = tmp_path_factory.mktemp("tinker-state")
    config = ServerConfig(
        models=default_models(), state_dir=state, poll_timeout_s=20, api_key=API_KEY
    )
    with ServerThread(config) as server:
        yield TinkerServer(server.base_url, TINY_NAME, state, server.app.state.service)
