"""The HTTP side of the Tinker server: thin FastAPI handlers grouped by concern.

Each module has one `router`; the handlers parse the request into a `wire` model, call the
`TinkerService` (which raises `ServiceError` for refusals) and send the `wire.Reply` it returns
with `deps.send` (its `body()`), so the JSON keys, their order and the fields left out when
None are the reply model's. `install_routes` adds them all.
"""

from __future__ import annotations

from fastapi import FastAPI

from skyrl_sdk.trainer.tinker.routes import (
    client,
    futures,
    models,
    runs,
    sampling,
    sessions,
    tokenizer,
    training,
    unsupported,
    weights,
)

ROUTERS = (
    client,
    models,
    training,
    weights,
    sampling,
    futures,
    runs,
    sessions,
    tokenizer,
    unsupported,
)
"""The route modules, in registration order."""


def install_routes(app: FastAPI) -> None:
    """Register every route module's endpoints on `app`."""
    for module in ROUTERS:
        app.include_router(module.router)
