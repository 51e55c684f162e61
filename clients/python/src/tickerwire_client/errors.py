"""The error envelope (docs/api.md#error-envelope) as exceptions.

``ApiError`` carries the status, ``code``, ``message``, ``field`` and ``retry_after`` of the
envelope plus the response ``meta`` (limit headers). Known codes map to their own class;
an unknown code still maps by status (``ClientError`` / ``ServerError``), so a new code
never breaks ``except`` clauses written today.
"""

from __future__ import annotations

from typing import Any, Mapping

from .meta import ResponseMeta, retry_after_seconds


class TickerwireError(Exception):
    """Base of every error this library raises."""


class TransportError(TickerwireError):
    """The server could not be reached or the connection broke (after any retries)."""


class ApiError(TickerwireError):
    status: int
    code: str

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        retry_after: float | None = None,
        meta: ResponseMeta | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.meta = meta
        self.body = body


class ClientError(ApiError):
    """A 4xx the library has no more specific class for."""


class ServerError(ApiError):
    """A 5xx the library has no more specific class for."""


class NotAuthenticated(ClientError):
    """401: the key is missing, malformed, unknown or revoked."""


class Forbidden(ClientError):
    """403: the key is valid but the workspace may not read now."""


class WorkspaceSuspended(Forbidden):
    pass


class BadgeMissing(Forbidden):
    """No badge heartbeat for over 72 h (or never): see the recovery steps in the message."""


class NotFound(ClientError):
    pass


class InvalidState(ClientError):
    """409: a well-formed request for a state that moved on."""


class CursorEpochChanged(InvalidState):
    """409 on ``changes``: the cursor belongs to an earlier log (docs/resume.md); fill the gap
    with ``posts(after=<last id>)`` once, then start again without a cursor."""


class IdempotencyKeyReused(InvalidState):
    """409 on a create: the ``Idempotency-Key`` was used in the last 24 hours with another body."""


class EndpointLimitReached(InvalidState):
    """409 on a create: the workspace already has its maximum of endpoints (100) not deleted."""


class ValidationFailed(ClientError):
    """422 (or 400): ``field`` names the offending input when there is one."""


class Throttled(ClientError):
    """429: wait ``retry_after`` seconds (from ``Retry-After``, else the body)."""


class RateLimited(Throttled):
    pass


class QuotaExhausted(Throttled):
    pass


class StreamLimitReached(Throttled):
    """The workspace already holds its maximum of concurrent stream connections."""


class ServiceUnavailable(ServerError):
    pass


class InternalError(ServerError):
    pass


_BY_CODE: dict[str, type[ApiError]] = {
    "NOT_AUTHENTICATED": NotAuthenticated,
    "WORKSPACE_SUSPENDED": WorkspaceSuspended,
    "BADGE_MISSING": BadgeMissing,
    "NOT_FOUND": NotFound,
    "INVALID_STATE": InvalidState,
    "CURSOR_EPOCH_CHANGED": CursorEpochChanged,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused,
    "ENDPOINT_LIMIT": EndpointLimitReached,
    "VALIDATION_FAILED": ValidationFailed,
    "RATE_LIMITED": RateLimited,
    "QUOTA_EXHAUSTED": QuotaExhausted,
    "STREAM_LIMIT_REACHED": StreamLimitReached,
    "SERVICE_UNAVAILABLE": ServiceUnavailable,
    "INTERNAL": InternalError,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    401: NotAuthenticated,
    403: Forbidden,
    404: NotFound,
    409: InvalidState,
    422: ValidationFailed,
    429: Throttled,
    500: InternalError,
    503: ServiceUnavailable,
}


def error_from_response(
    status: int, body: Any, headers: Mapping[str, str], meta: ResponseMeta | None = None
) -> ApiError:
    """The exception for a 4xx/5xx; tolerates a body that is not the envelope."""
    envelope = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(envelope, Mapping):
        envelope = {}
    code = str(envelope.get("code") or f"HTTP_{status}")
    message = str(envelope.get("message") or "no error envelope in the response")
    retry_after = retry_after_seconds(headers)  # docs/api.md#retry-after: prefer the header
    if retry_after is None and isinstance(envelope.get("retry_after_sec"), (int, float)):
        retry_after = float(envelope["retry_after_sec"])
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else ClientError)
    field = envelope.get("field")
    return cls(
        status,
        code,
        message,
        field=field if isinstance(field, str) else None,
        retry_after=retry_after,
        meta=meta,
        body=body,
    )
