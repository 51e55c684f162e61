"""Structured logging: one JSON object per line on stderr, through the standard ``logging``."""

from __future__ import annotations

import logging
import re
import sys
from datetime import datetime, timezone

import orjson

from .errors import ConfigError
from .requestlog import RequestIdFilter

#: Anything that looks like an API key is masked before a line is written. This is the second
#: line of defence: keys are never passed to a logger on purpose, and aiohttp's access log is
#: off (it would print the stream's ``?key=`` query string); ours (requestlog.py) never does.
_KEY_RE = re.compile(r"tw_(live|test)_[A-Za-z0-9_\-]{8,}")


def redact(text: str) -> str:
    return _KEY_RE.sub(lambda m: f"tw_{m.group(1)}_***", text)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            doc["request_id"] = request_id
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            doc.update(extra)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        # Redact the finished line: message, extra fields at any depth, tracebacks. Key
        # characters are all JSON-safe, so a key reads the same inside the serialized line.
        return redact(orjson.dumps(doc, default=str).decode())


def setup_logging(service: str, level: str = "INFO") -> None:
    if not isinstance(logging.getLevelName(level.upper()), int):
        raise ConfigError(f"TICKERWIRE_LOG_LEVEL={level!r} is invalid: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # warnings too go through the formatter (and its redaction)
    # aiohttp's access log would print query strings (the stream's key); our middleware logs instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
