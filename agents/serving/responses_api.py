"""`POST /v1/responses (the OpenAI Responses API)`: plan, answer (plain or streamed), capture.

Routes are added by `add_routes`, which `create_app` calls for every app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from skyrl_sdk.agents.serving.state import Server


def add_routes(app: FastAPI, server: Server) -> None:
    """Add this API's routes to `app`, answered by `server`."""
