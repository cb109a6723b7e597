"""Endpoints the SDK knows that cannot be meaningful locally: HTTP 400 with a JSON body naming
why (a 4xx, because the SDK retries 5xx replies for minutes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, HTTPException

NOT_HERE = "not supported by the local tinker server"
"""How every such refusal begins."""

UNSUPPORTED = {
    ("POST", "/api/v1/copy_weights"): "copying weights into another project needs hosted "
    "projects; a local server has one user and no projects (load the tinker:// path directly)",
    (
        "GET",
        "/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/external_weights_urls",
    ): "signed download URLs need hosted object storage; checkpoints stay under the server's "
    "state dir",
    ("PUT", "/api/v1/sessions/{session_id}/project"): "a local server has no projects",
    ("GET", "/api/v1/sessions/{session_id}/trace_export"): "trace exports need the hosted "
    "request timeline, which a local server does not record",
    ("GET", "/api/v1/billing/usage/events"): "a local server does no billing",
    ("GET", "/api/v1/audit"): "a local server keeps no audit log",
    ("POST", "/api/v1/create_custom_loss"): "server-side custom losses are off "
    "(custom_loss_server_side); forward_backward_custom computes the loss in the client",
    ("POST", "/api/v1/retrieve_futures"): "batched polling is off (sample_use_retrieve_futures); "
    "poll with retrieve_future",
    ("POST", "/api/v1/join_sampling_session"): "joining sampling sessions is off "
    "(sample_join_sampling_session)",
}
"""Endpoints with the reason (`save_weights_external` too, refused in `weights` since it must
use up its seq_id)."""

EXTERNAL_WHY = (
    "exporting weights to external storage with signed URLs needs hosted object storage; "
    "checkpoints stay under the server's state dir (save_state / save_weights_for_sampler)"
)
"""Why weights cannot be exported to external storage."""


def not_here(why: str) -> HTTPException:
    """The 400 of an endpoint that needs hosted infrastructure."""
    return HTTPException(400, f"{NOT_HERE}: {why}")


def _refuser(why: str) -> Callable[[], Awaitable[None]]:
    async def unsupported() -> None:
        raise not_here(why)

    return unsupported


router = APIRouter()
for (_method, _route), _why in UNSUPPORTED.items():
    router.add_api_route(_route, _refuser(_why), methods=[_method])
