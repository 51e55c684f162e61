"""Request headers no handler should have to cope with."""

from __future__ import annotations

from typing import Iterable


def undecodable_header(headers: Iterable[tuple[str, str]]) -> str | None:
    """The name of the first header whose name or value is not valid UTF-8, else None.

    The HTTP parser keeps undecodable bytes as lone surrogates; anything that later encodes
    such a value (a hash, a comparison with bytes) would fail with an internal error."""
    for name, value in headers:
        try:
            name.encode("utf-8")
            value.encode("utf-8")
        except UnicodeEncodeError:
            return name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    return None
