"""The one error type of the Tinker service layer.

The service refuses a request with `ServiceError(status, message)`; it knows nothing of HTTP
beyond the status number, and the routes turn it into a JSON reply. Inside a queued job the
same error fails the future with the message (category `user`).
"""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """Why the service refuses a request, as the HTTP status the routes answer with."""

    BAD_REQUEST = 400
    """Malformed or inconsistent request."""
    NOT_FOUND = 404
    """Unknown session, model, sampler, request or checkpoint."""
    GONE = 410
    """A model or sampler whose state a restart lost."""
    TOO_LARGE = 413
    """A body (once decompressed) over the size cap."""
    BUSY = 429
    """The server's bound on queued work is reached: retry later."""


class ServiceError(Exception):
    """A refused request: `status` says which kind, `message` what is wrong."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status = status
        """Which kind of refusal (the HTTP status)."""
        self.message = message
        """One line for the client."""


def refusal(e: ValueError | KeyError) -> ServiceError:
    """A KeyError as NOT_FOUND and a ValueError as BAD_REQUEST, with the message."""
    message = str(e.args[0]) if e.args else str(e)
    return ServiceError(
        Status.NOT_FOUND if isinstance(e, KeyError) else Status.BAD_REQUEST, message
    )
