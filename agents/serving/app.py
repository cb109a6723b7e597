"""The FastAPI app: routes for models, chat completions and completions, over any `Policy`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.engine.fairness import TenantQueueFull
from skyrl_sdk.agents.policy import (
    Policy,
    PolicyError,
)
from skyrl_sdk.agents.serving import messages_api, responses_api
from skyrl_sdk.agents.serving.auth import SessionGate, SessionKeys
from skyrl_sdk.agents.serving.capture import SessionStore
from skyrl_sdk.agents.serving.chat_api import chat_events, chat_response, plan_chat
from skyrl_sdk.agents.serving.completions_api import (
    completion_events,
    completion_response,
    plan_completion,
)
from skyrl_sdk.agents.serving.config import ServeConfig
from skyrl_sdk.agents.serving.generation import (
    ClientDisconnected,
    until_disconnect,
)
from skyrl_sdk.agents.serving.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    parse_body,
)
from skyrl_sdk.agents.serving.sse import EventStreamResponse, json_response
from skyrl_sdk.agents.serving.state import Server, session_queue_full
from skyrl_sdk.agents.serving.streaming import start_stream
from skyrl_sdk.http_guard import ErrorStyle, GuardConfig, install

if TYPE_CHECKING:
    from fastapi import FastAPI

    from skyrl_sdk.agents.chat import ChatRenderer


log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/health"})
"""Served without a key: liveness probes carry no credentials."""


def create_app(
    policy: Policy,
    config: ServeConfig | None = None,
    *,
    renderer: ChatRenderer | None = None,
    store: SessionStore | None = None,
    keys: SessionKeys | None = None,
) -> FastAPI:
    """The FastAPI app serving `policy` (see the package docstring for what it guarantees).

    `renderer`: the chat template and tokenizer requests are rendered with (default: the
    policy's). `store` / `keys`: the sessions and session keys (default: new ones).
    """
    from fastapi import FastAPI

    config = config or ServeConfig()
    keys = keys or SessionKeys(config.session_token_budget)
    server = Server(
        policy,
        config,
        renderer if renderer is not None else policy.renderer,
        store or SessionStore(policy.name, config.capture_dir),
        keys,
    )
    app = FastAPI(title="skyrl serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server
    install(
        app,
        GuardConfig(
            api_key=None,  # keys are SessionGate's job (it also knows the session keys)
            max_request_bytes=config.max_request_bytes,
            open_paths=OPEN_PATHS,
            error_style=ErrorStyle.OPENAI,
        ),
    )
    app.add_middleware(SessionGate, api_key=config.api_key, keys=keys, open_paths=OPEN_PATHS)
    if config.log_requests:  # added last: the outermost layer, so refusals are logged too
        from skyrl_sdk.agents.serving.request_log import RequestLog

        app.add_middleware(RequestLog)

    _add_error_handlers(app)
    _add_routes(app, server)
    responses_api.add_routes(app, server)
    messages_api.add_routes(app, server)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as an OpenAI-style JSON body (a cancelled generation as a bare 499)."""
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(ClientDisconnected)
    async def client_gone(request: Request, e: ClientDisconnected) -> Response:
        return Response(status_code=499)  # nobody reads it; the generation was cancelled

    @app.exception_handler(TenantQueueFull)
    async def queue_full(request: Request, e: TenantQueueFull) -> JSONResponse:
        return JSONResponse(session_queue_full(e).body(), status_code=429)

    @app.exception_handler(PolicyError)
    async def policy_error(request: Request, e: PolicyError) -> JSONResponse:
        return JSONResponse(ApiError(500, str(e), code="policy_error").body(), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = (
            f"no such path: {request.method} {request.url.path}"
            if e.status_code == 404
            else str(e.detail)
        )
        return JSONResponse(ApiError(e.status_code, message).body(), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        log.exception("request failed")
        body = ApiError(500, f"internal server error: {type(e).__name__}").body()
        return JSONResponse(body, status_code=500)


def _add_routes(app: FastAPI, server: Server) -> None:
    """/health, the model list and the two completion endpoints, all answered by `server`."""
    config = server.config

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    def model_card() -> dict[str, Any]:
        return {
            "id": config.model_name,
            "object": "model",
            "created": server.created,
            "owned_by": "skyrl",
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        server.check_model(model_id)
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        req = parse_body(await request.body(), ChatRequest)
        plan = server.admit(plan_chat(server, request, req))
        if not req.stream:
            async with server.settling(plan):
                return json_response(await chat_response(server, request, req, plan))
        async with server.settling(plan, streamed=True):
            first = await until_disconnect(request.receive, start_stream(server, plan))
        return EventStreamResponse(server.settled(plan, chat_events(server, req, plan, first)))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req = parse_body(await request.body(), CompletionRequest)
        plan = server.admit(plan_completion(server, request, req))
        if not req.stream:
            async with server.settling(plan):
                return json_response(await completion_response(server, request, req, plan))
        async with server.settling(plan, streamed=True):
            first = await until_disconnect(request.receive, start_stream(server, plan))
        events = completion_events(server, req, plan, first)
        return EventStreamResponse(server.settled(plan, events))
