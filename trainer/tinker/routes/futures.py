"""Futures: retrieve_future (long-poll; protobuf results for SDK 0.25+) and cancel_future."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send
from skyrl_sdk.trainer.tinker.routes.training import PROTO
from skyrl_sdk.trainer.tinker.store import FutureState

router = APIRouter(prefix=API)


@router.post("/retrieve_future")
async def retrieve_future(req: wire.FutureRequest, request: Request, svc: Service) -> Response:
    record = await svc.retrieve(req.request_id)
    if record.state is FutureState.PENDING:
        return send(wire.TryAgain(request_id=req.request_id))
    if record.state is not FutureState.DONE:
        return JSONResponse(record.result)
    proto = PROTO in request.headers.get("accept", "")
    if record.kind in ("forward", "forward_backward"):
        if proto:
            return Response(wire.forward_backward_to_proto(record.result), media_type=PROTO)
        return JSONResponse(wire.forward_backward_to_json(record.result))
    if record.kind == "sample":
        if proto:
            return Response(wire.sample_to_proto(record.result), media_type=PROTO)
        return JSONResponse(wire.sample_to_json(record.result))
    return JSONResponse(record.result)


@router.post("/cancel_future")
async def cancel_future(req: wire.CancelRequest, svc: Service) -> JSONResponse:
    return send(svc.cancel(req.request_id))
