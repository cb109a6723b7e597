"""Sampling: sampling sessions and asample."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send

router = APIRouter(prefix=API)


@router.post("/create_sampling_session")
async def create_sampling_session(
    req: wire.CreateSamplingSessionRequest, svc: Service
) -> JSONResponse:
    return send(await svc.create_sampling_session(req))


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, svc: Service) -> JSONResponse:
    return send(svc.sampler_info(sampler_id))


@router.post("/asample")
async def asample(req: wire.SampleRequest, svc: Service) -> JSONResponse:
    return send(svc.asample(req))
