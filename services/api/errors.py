"""The read API's words in the error envelope (:mod:`..common.http.envelope` builds it): the 422 and
404 of its handlers, and what it says for an unknown path, a wrong method or a browser (the
:func:`routes` its request path, :mod:`.pipeline`, answers with)."""

from __future__ import annotations

from ..common.http.envelope import ApiError, Routes


def validation_failed(field: str, message: str) -> ApiError:
    return ApiError(422, "VALIDATION_FAILED", message, field=field)


def not_found(message: str = "The resource does not exist or is not visible to this key.") -> ApiError:
    return ApiError(404, "NOT_FOUND", message)


#: No CORS: partner keys are secrets, and a browser calling the API would hold one. No
#: response carries Access-Control-* headers, so browsers refuse cross-origin reads, and a
#: preflight gets this 405.
NO_CORS = (
    "Browsers may not call this API (no CORS): an API key is a secret and must stay on your "
    "server. Call the API from your backend."
)


def routes(base_path: str) -> Routes:
    return Routes(
        not_found=f"No such endpoint. See {base_path}/openapi.json for the endpoints of this API.",
        method_not_allowed="This method is not allowed on this path: the Allow header lists those that are.",
        allow="GET, HEAD",
        preflight=NO_CORS,
    )
