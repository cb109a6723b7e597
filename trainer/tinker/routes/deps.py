"""What the handlers share: the service of the app they serve."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.service import TinkerService

API = "/api/v1"
"""Prefix of every endpoint."""


async def _service(request: Request) -> TinkerService:
    # async: FastAPI would run a plain function on its thread pool, a hop per request.
    return request.app.state.service


Service = Annotated[TinkerService, Depends(_service)]
"""A handler parameter receiving the app's `TinkerService`."""


def send(reply: wire.Reply) -> JSONResponse:
    """A reply as the JSON response (its `body()`: the reply model's keys, in its order, less
    the fields it leaves out when None). Encoded as FastAPI encodes a returned dict, without
    its second validation pass."""
    return JSONResponse(reply.body())
