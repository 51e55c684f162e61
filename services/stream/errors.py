"""The stream's words in the error envelope (:mod:`..common.http.envelope` builds it): what it says
for an unknown path or a wrong method."""

from __future__ import annotations

from ..common.http.envelope import Routes, error_middleware


def error_envelope(base_path: str, max_body: int):
    """The envelope's middleware (:func:`..common.http.envelope.error_middleware`) with the stream's words."""
    return error_middleware(
        Routes(
            not_found=f"No such endpoint. The stream is served at {base_path}/stream?key=<API_KEY>.",
            method_not_allowed="The stream accepts only GET (a WebSocket upgrade).",
            allow="GET",
        ),
        max_body=max_body,
    )
