"""Saving and loading weights: save_state, sampler weights, load (create-via-load or legacy)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.errors import Status
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send
from skyrl_sdk.trainer.tinker.routes.unsupported import EXTERNAL_WHY, NOT_HERE

router = APIRouter(prefix=API)


@router.post("/save_weights")
async def save_weights(req: wire.SaveWeightsRequest, svc: Service) -> JSONResponse:
    return send(svc.save_weights(req))


@router.post("/save_weights_for_sampler")
async def save_for_sampler(req: wire.SaveWeightsRequest, svc: Service) -> JSONResponse:
    return send(svc.save_weights_for_sampler(req))


@router.post("/load_weights")
async def load_weights(req: wire.LoadWeightsRequest, svc: Service) -> JSONResponse:
    return send(svc.load_weights(req))


@router.post("/save_weights_external")
async def save_weights_external(req: wire.SaveWeightsRequest, svc: Service) -> JSONResponse:
    # Refused here, not with the other hosted-only endpoints: it must use up its seq_id.
    raise svc.refuse(req.model_id, req.seq_id, Status.BAD_REQUEST, f"{NOT_HERE}: {EXTERNAL_WHY}")
