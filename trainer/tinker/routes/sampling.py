"""Sampling: sampling sessions and asample."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service

router = APIRouter(prefix=API)


@router.post("/create_sampling_session")
async def create_sampling_session(
    req: wire.CreateSamplingSessionRequest, svc: Service
) -> dict[str, Any]:
    return (await svc.create_sampling_session(req)).body()


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, svc: Service) -> dict[str, Any]:
    return svc.sampler_info(sampler_id).body()


@router.post("/asample")
async def asample(req: wire.SampleRequest, svc: Service) -> dict[str, Any]:
    return svc.asample(req).body()
