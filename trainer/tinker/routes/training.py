"""Training steps: forward_backward (protobuf or legacy JSON body), forward, optim_step."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send

router = APIRouter(prefix=API)

PROTO = "application/x-protobuf"
"""Content type of protobuf bodies and results."""


def unzstd(body: bytes, limit: int) -> bytes:
    """Decompress a zstd body, 413 if it inflates past `limit` bytes (a small body must not
    become a large one in memory)."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(body) as reader:
        data = reader.read(limit + 1)
    if len(data) > limit:
        raise ServiceError(Status.TOO_LARGE, f"zstd body decompresses to more than {limit} bytes")
    return data


async def decode(request: Request, forward_only: bool, limit: int) -> wire.ForwardBackwardCall:
    """The forward_backward call in a request body (400 if it does not decode)."""
    body = await request.body()
    try:
        if request.headers.get("content-encoding", "") == "zstd":
            body = unzstd(body, limit)
        if PROTO in request.headers.get("content-type", ""):
            return wire.decode_forward_backward(body)
        parsed = wire.ForwardBackwardJSON.model_validate_json(body)
        return wire.decode_forward_backward_json(parsed, forward_only)
    except ServiceError:  # 413 for an inflating zstd body
        raise
    except Exception as e:  # any decoding failure is the client's
        raise HTTPException(400, f"bad forward_backward body: {e}") from e


@router.post("/forward_backward")
async def forward_backward(request: Request, svc: Service) -> JSONResponse:
    call = await decode(request, False, svc.config.max_request_bytes)
    return send(svc.forward_backward(call))


@router.post("/forward")
async def forward(request: Request, svc: Service) -> JSONResponse:
    call = await decode(request, True, svc.config.max_request_bytes)
    return send(svc.forward_backward(call))


@router.post("/optim_step")
async def optim_step(req: wire.OptimStepRequest, svc: Service) -> JSONResponse:
    return send(svc.optim_step(req))
