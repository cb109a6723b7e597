"""`HttpRetriever`: a client for retrieval servers that speak the Search-R1 API.

The API is one endpoint: `POST /retrieve` with `{"queries": [str], "topk": int,
"return_scores": bool}`, answered by `{"result": [[hit, ...], ...]}` (one list per query). A hit
is `{"document": doc, "score": float}` when scores were asked for, else the bare `doc`; a `doc`
is `{"id", "title", "text"}` or Search-R1's `{"id", "contents"}`. Any dense or sparse retriever
served that way (Search-R1's own server, `skyrl search serve`) plugs into the search env.

Connection failures, timeouts and 429/5xx answers are retried with exponential backoff; after
the last attempt a `RetrievalError` says which URL failed, how, and how often it was tried.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from skyrl_sdk.tools.search.types import (
    CorpusError,
    Passage,
    RetrievalError,
    RetrievalFailure,
    document_from_json,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a failed request."""

    attempts: int = 3
    """Total tries per request (1 = no retry)."""
    backoff_s: float = 0.2
    """Wait before the second try; doubles on every further try."""
    max_backoff_s: float = 5.0
    """Upper bound of one wait."""
    retry_statuses: frozenset[int] = frozenset({429, 500, 502, 503, 504})
    """HTTP statuses worth retrying; any other 4xx/5xx fails at once."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try number `attempt` (1-based)."""
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))


def retrieve_url(url: str) -> str:
    """`url` itself if it names a path, else `url` + `/retrieve` (a bare `http://host:port`)."""
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"retrieval server URL must be http(s)://host[:port][/path], got {url!r}")
    return url.rstrip("/") + "/retrieve" if parsed.path in ("", "/") else url


def _passage(hit: object) -> Passage:
    if isinstance(hit, dict) and isinstance(hit.get("document"), dict):
        doc, score = hit["document"], hit.get("score", 0.0)
    else:
        doc, score = hit, 0.0
    if not isinstance(score, int | float):
        raise CorpusError(f"score must be a number, got {score!r:.80}")
    d = document_from_json(doc)
    return Passage(d.id, d.title, d.text, float(score))


class HttpRetriever:
    """A `Retriever` that asks a Search-R1-style server; thread-safe (one pooled client)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
    ):
        """`api_key`: sent as `Authorization: Bearer KEY` (default: `$SKYRL_API_KEY`, the key
        `skyrl search serve --api-key` reads too; none if unset)."""
        self.url = retrieve_url(url)
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        key = api_key if api_key is not None else os.environ.get("SKYRL_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout_s, transport=transport, headers=headers)

    def retrieve(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """Up to `topk` passages per query, best first. Raises `RetrievalError`."""
        if not queries:
            return []
        body = {"queries": list(queries), "topk": topk, "return_scores": True}
        payload = self._post(body)
        result = payload.get("result") if isinstance(payload, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(
                RetrievalFailure.BAD_RESPONSE,
                f"{self.url} answered without a 'result' list of {len(queries)} entries "
                f"(got {str(payload)[:120]!r})",
            )
        try:
            return [[_passage(hit) for hit in hits[:topk]] for hits in result]
        except (CorpusError, TypeError) as e:
            raise RetrievalError(
                RetrievalFailure.BAD_RESPONSE, f"{self.url} returned a malformed hit: {e}"
            ) from e

    def _post(self, body: dict[str, Any]) -> Any:
        failure, detail = RetrievalFailure.UNREACHABLE, ""
        for attempt in range(1, self.retry.attempts + 1):
            if attempt > 1:
                time.sleep(self.retry.delay(attempt - 1))
            try:
                response = self._client.post(self.url, json=body)
            except httpx.TimeoutException as e:
                failure, detail = (
                    RetrievalFailure.TIMEOUT,
                    f"no answer within {self.timeout_s}s ({type(e).__name__})",
                )
                continue
            except httpx.TransportError as e:
                failure, detail = RetrievalFailure.UNREACHABLE, f"{type(e).__name__}: {e}"
                continue
            if response.status_code in self.retry.retry_statuses:
                failure, detail = RetrievalFailure.SERVER_ERROR, f"HTTP {response.status_code}"
                continue
            if response.is_error:
                raise RetrievalError(
                    RetrievalFailure.BAD_REQUEST,
                    f"{self.url} rejected the request: HTTP {response.status_code} "
                    f"{response.text[:200]!r}",
                )
            try:
                return response.json()
            except ValueError:
                raise RetrievalError(
                    RetrievalFailure.BAD_RESPONSE,
                    f"{self.url} did not answer with JSON: {response.text[:120]!r}",
                ) from None
        tries = f"{self.retry.attempts} attempt{'s' if self.retry.attempts != 1 else ''}"
        raise RetrievalError(failure, f"retrieval server {self.url} failed after {tries}: {detail}")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
