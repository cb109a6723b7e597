"""A base model's tokenizer files, so that a client on another machine can load the tokenizer
`get_info` and the samplers name (`skyrl tinker tokenizer pull` stores them in its Hugging
Face cache). Behind the API key like every route; only the files `tokenizer_files` lists, of
the served base models."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, JSONResponse

from skyrl_sdk.trainer.tinker import tokenizer_files
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send

router = APIRouter(prefix=API)


def _directory(svc: Service, base_model: str) -> Path:
    spec = svc.bases.specs.get(base_model)
    if spec is None:
        raise ServiceError(Status.NOT_FOUND, f"unknown base model {base_model!r}")
    return spec.tokenizer_dir


# Plain functions: FastAPI runs them on its thread pool, so hashing and reading files does not
# hold up the event loop.
@router.get("/tokenizer")
def tokenizer_manifest(svc: Service, base_model: str) -> JSONResponse:
    return send(tokenizer_files.manifest(base_model, _directory(svc, base_model)))


@router.get("/tokenizer/file")
def tokenizer_file(svc: Service, base_model: str, name: str) -> FileResponse:
    try:
        path = tokenizer_files.file_path(_directory(svc, base_model), name)
    except KeyError as e:
        raise ServiceError(Status.NOT_FOUND, str(e.args[0])) from e
    except ValueError as e:
        raise ServiceError(Status.TOO_LARGE, str(e)) from e
    return FileResponse(path, media_type="application/octet-stream")
