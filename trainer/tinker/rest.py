"""The REST side of the Tinker API (what `tinker.RestClient` and the `tinker` CLI call).

Served from the registry: training runs, their checkpoints (list, delete, publish flag, TTL),
checkpoints across runs, weights info by tinker:// path, sessions (list, get, search) and
checkpoint storage usage. Endpoints that need hosted infrastructure (projects, object-storage
exports with signed URLs, billing, audit logs, trace exports) answer HTTP 400 with a JSON body
naming why: a 4xx, because the SDK retries 5xx replies for minutes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from fastapi import FastAPI, HTTPException

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import read_meta
from skyrl_sdk.trainer.tinker.server import TinkerService, http_error, iso, str_metadata
from skyrl_sdk.trainer.tinker.store import CheckpointKind, RunRow, SessionRow

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
"""Endpoints the SDK knows that cannot be meaningful locally, with the reason
(`save_weights_external` too, refused in `server` since it must use up its seq_id)."""

EXTERNAL_WHY = (
    "exporting weights to external storage with signed URLs needs hosted object storage; "
    "checkpoints stay under the server's state dir (save_state / save_weights_for_sampler)"
)


def _not_here(why: str) -> HTTPException:
    return HTTPException(400, f"not supported by the local tinker server: {why}")


def _cursor(offset: int, limit: int, total: int) -> dict[str, int]:
    return {"offset": offset, "limit": limit, "total_count": total}


def add_rest_routes(app: FastAPI, svc: TinkerService) -> None:
    """Register the REST endpoints on `app`."""
    registry = svc.registry

    def run_or_404(model_id: str) -> RunRow:
        run = registry.runs.get(model_id)
        if run is None:
            raise HTTPException(404, f"unknown training run {model_id!r}")
        return run

    # -- training runs ------------------------------------------------------------------------

    @app.get("/api/v1/training_runs")
    async def list_training_runs(
        limit: int = 20, offset: int = 0, project_id: str | None = None
    ) -> dict[str, Any]:
        svc.purge_expired()
        where, params = "1", ()
        if project_id is not None:
            where = "session_id IN (SELECT session_id FROM sessions WHERE project_id=?)"
            params = (project_id,)
        rows = registry.runs.select(where, params, order="created DESC", limit=limit, offset=offset)
        return {
            "training_runs": [svc.run_json(r) for r in rows],
            "cursor": _cursor(offset, limit, registry.runs.count(where, params)),
        }

    @app.get("/api/v1/training_runs/{model_id}")
    async def get_training_run(model_id: str) -> dict[str, Any]:
        svc.purge_expired()
        return svc.run_json(run_or_404(model_id))

    @app.get("/api/v1/training_runs/{model_id}/checkpoints")
    async def list_checkpoints(model_id: str) -> dict[str, Any]:
        run_or_404(model_id)
        svc.purge_expired()
        rows = registry.checkpoints.select("model_id=?", (model_id,), order="created")
        return {"checkpoints": [svc.checkpoint_json(r) for r in rows], "cursor": None}

    @app.get("/api/v1/checkpoints")
    async def list_user_checkpoints(limit: int = 100, offset: int = 0) -> dict[str, Any]:
        svc.purge_expired()
        rows = registry.checkpoints.select(order="created DESC", limit=limit, offset=offset)
        return {
            "checkpoints": [svc.checkpoint_json(r) for r in rows],
            "cursor": _cursor(offset, limit, registry.checkpoints.count()),
        }

    # -- one checkpoint: tinker://{model_id}/{kind}/{name} ------------------------------------

    def checkpoint_path(model_id: str, kind: str, name: str) -> str:
        if kind not in (k.value for k in CheckpointKind):
            if kind == "external_weights":
                raise _not_here(EXTERNAL_WHY)
            raise HTTPException(
                400,
                f"checkpoint ids look like weights/<name> or "
                f"sampler_weights/<name>, got {kind}/{name}",
            )
        try:
            svc.checkpoint_dir(model_id, kind, name)  # names checked: 400, not a path lookup
        except ValueError as e:
            raise HTTPException(400, str(e)) from e
        path = f"tinker://{model_id}/{kind}/{name}"
        svc.purge_expired()
        if registry.checkpoints.get(path) is None:
            raise HTTPException(404, f"no checkpoint at {path}")
        return path

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}")
    async def delete_checkpoint(model_id: str, kind: str, name: str) -> dict[str, Any]:
        path = checkpoint_path(model_id, kind, name)
        svc.delete_checkpoint(path)
        return {"deleted": path}

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{checkpoint_id}")
    async def delete_bare_checkpoint(model_id: str, checkpoint_id: str) -> dict[str, Any]:
        raise HTTPException(
            400,
            f"checkpoint ids look like weights/<name> or sampler_weights/<name>, "
            f"got {checkpoint_id!r}",
        )

    @app.post("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/publish")
    async def publish(model_id: str, kind: str, name: str) -> dict[str, Any]:
        path = checkpoint_path(model_id, kind, name)
        registry.checkpoints.update(path, public=True)
        return {"tinker_path": path, "public": True}

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/publish")
    async def unpublish(model_id: str, kind: str, name: str) -> dict[str, Any]:
        path = checkpoint_path(model_id, kind, name)
        registry.checkpoints.update(path, public=False)
        return {"tinker_path": path, "public": False}

    @app.put("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}/ttl")
    async def set_ttl(model_id: str, kind: str, name: str, req: wire.TtlRequest) -> dict[str, Any]:
        path = checkpoint_path(model_id, kind, name)
        expires = None if req.ttl_seconds is None else time.time() + req.ttl_seconds
        registry.checkpoints.update(path, expires_at=expires)
        return {"tinker_path": path, "expires_at": expires}

    @app.post("/api/v1/weights_info")
    async def weights_info(req: wire.WeightsInfoRequest) -> dict[str, Any]:
        try:
            _, directory = svc.resolve(req.tinker_path)
            meta = read_meta(directory)
        except (ValueError, KeyError) as e:
            raise http_error(e) from e
        lora = meta.get("lora")
        info: dict[str, Any] = {
            "base_model": meta["base_model"],
            "optimizer_config": {"type": "adamw"},
            "is_lora": lora is not None,
        }
        if lora is not None:
            info.update(
                lora_rank=lora["rank"],
                train_unembed=lora["train_unembed"],
                train_mlp=lora["train_mlp"],
                train_attn=lora["train_attn"],
            )
        return info

    # -- sessions -----------------------------------------------------------------------------

    @app.get("/api/v1/sessions")
    async def list_sessions(limit: int = 20, offset: int = 0) -> dict[str, Any]:
        rows = registry.sessions.select(order="created DESC", limit=limit, offset=offset)
        return {"sessions": [r.session_id for r in rows]}

    @app.get("/api/v1/sessions/{session_id}")
    async def get_session(session_id: str) -> dict[str, Any]:
        row = svc.session(session_id)
        runs = registry.runs.select("session_id=?", (session_id,))
        samplers = registry.samplers.select("session_id=?", (session_id,))
        return {
            "training_run_ids": [r.model_id for r in runs],
            "sampler_ids": [s.sampler_id for s in samplers],
            "user_metadata": str_metadata(row.user_metadata),
            "display_name": row.display_name,
        }

    def summary(row: SessionRow) -> dict[str, Any]:
        ckpts = registry.checkpoints.select(
            "model_id IN (SELECT model_id FROM training_runs WHERE session_id=?)",
            (row.session_id,),
        )
        return {
            "session_id": row.session_id,
            "created_at": iso(row.created),
            "owner": "local",
            "project_id": row.project_id or "local",
            "status": _status(row),
            "checkpoints_count": len(ckpts),
            "display_name": row.display_name,
            "user_metadata": str_metadata(row.user_metadata),
            "checkpoint_storage_bytes": sum(c.size_bytes for c in ckpts),
        }

    @app.post("/api/v1/sessions/search")
    async def search_sessions(req: wire.SessionSearchRequest) -> dict[str, Any]:
        where, params = "1", []
        if req.cursor is not None:
            try:
                last = datetime.fromisoformat(str(req.cursor["last_created_at"])).timestamp()
                last_id = str(req.cursor["last_session_id"])
            except (KeyError, ValueError) as e:
                raise HTTPException(400, f"bad cursor: {e}") from e
            where = "(created < ? OR (created = ? AND session_id < ?))"
            params = [last, last, last_id]
        rows = registry.sessions.select(where, tuple(params), order="created DESC, session_id DESC")
        found = [r for r in rows if _matches(r, req)]
        page = found[: req.limit]
        more = len(found) > req.limit
        cursor = (
            {"last_created_at": iso(page[-1].created), "last_session_id": page[-1].session_id}
            if more
            else None
        )
        return {"sessions": [summary(r) for r in page], "next_cursor": cursor}

    # -- usage ----------------------------------------------------------------------------------

    @app.get("/api/v1/billing/usage/checkpoints/current")
    async def checkpoint_storage(project_id: str | None = None) -> dict[str, Any]:
        svc.purge_expired()
        rows = registry.checkpoints.select()
        size = sum(r.size_bytes for r in rows)
        item = {
            "project_id": project_id,
            "checkpoint_count": len(rows),
            "size_bytes": size,
            "size_gigabytes": size / 1e9,
        }
        return {"effective_rate_usd_per_gigabyte_month": None, "data": [item]}

    # -- not meaningful locally -----------------------------------------------------------------

    for (method, route), why in UNSUPPORTED.items():
        app.add_api_route(route, _refuser(why), methods=[method])


def _refuser(why: str) -> Callable[[], Awaitable[None]]:
    async def unsupported() -> None:
        raise _not_here(why)

    return unsupported


def _status(row: SessionRow) -> dict[str, Any]:
    """The SDK's `SessionStatus` of a session: active, or finished by its client."""
    if row.finished is None:
        return {"type": "active"}
    reason = row.finished.get("reason") or {"type": "success"}
    return {"type": "client_finished", "reason": reason, "detail": row.finished.get("detail")}


def _matches(row: SessionRow, req: wire.SessionSearchRequest) -> bool:
    """Whether a session passes a search's filters (see `tinker.types.SessionSearchRequest`)."""
    if req.session_id is not None or req.display_name is not None:
        by_id = req.session_id is not None and row.session_id == req.session_id
        words = (req.display_name or "").lower().split()
        name = (row.display_name or "").lower()
        by_name = req.display_name is not None and all(w in name for w in words)
        if not (by_id or by_name):
            return False
    meta = str_metadata(row.user_metadata)
    if any(meta.get(k) != v for k, v in req.user_metadata.items()):
        return False
    if req.statuses is not None:
        status = _status(row)
        for query in req.statuses:
            if query.get("type") != status["type"]:
                continue
            reasons = query.get("reasons")
            if reasons is None or status.get("reason", {}).get("type") in reasons:
                return True
        return False
    return True
