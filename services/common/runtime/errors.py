"""The project's small error hierarchy. Library errors are translated at the seams into these."""

from __future__ import annotations


class TickerwireError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(TickerwireError):
    """A required setting is missing or a value cannot be parsed."""


class TransientError(TickerwireError):
    """A dependency (database, broker) failed in a way that a retry may fix."""


class StorageUnavailable(TransientError):
    """PostgreSQL could not be reached or dropped the connection."""


class BrokerUnavailable(TransientError):
    """The Kafka-protocol broker could not be reached."""


class InvalidParameter(TickerwireError):
    """A query parameter breaks its documented grammar; each service answers 422 VALIDATION_FAILED."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
