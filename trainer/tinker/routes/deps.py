"""What the handlers share: the service of the app they serve."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from skyrl_sdk.trainer.tinker.service import TinkerService

API = "/api/v1"
"""Prefix of every endpoint."""


async def _service(request: Request) -> TinkerService:
    # async: FastAPI would run a plain function on its thread pool, a hop per request.
    return request.app.state.service


Service = Annotated[TinkerService, Depends(_service)]
"""A handler parameter receiving the app's `TinkerService`."""
