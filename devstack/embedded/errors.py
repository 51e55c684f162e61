"""The error of the embedded servers."""

from __future__ import annotations

from tickerwire.services.common.runtime.errors import TickerwireError


class EmbeddedError(TickerwireError):
    """An embedded dependency (PostgreSQL, broker) could not be started."""
