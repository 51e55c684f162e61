"""Structured logging: one JSON object per line on stderr, through the standard ``logging``.

Lines are written by a :class:`LineHandler`: WARNING and above at once, INFO and below gathered
for at most :data:`FLUSH_AFTER_S` (or :data:`FLUSH_BYTES`) and written together, so a busy API
process does not pay a write system call per access-log line. The buffer is written before any
WARNING line (order kept), at exit (``logging.shutdown``) and by the timer; a process killed with
SIGKILL can lose the INFO lines of its last :data:`FLUSH_AFTER_S`. :func:`info_line` writes one
INFO line without a ``LogRecord``, in the same shape (and :mod:`.shaped_lines` lines that differ
only in their time, request id and one number, from a template per shape).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable, TextIO

import orjson

from .errors import ConfigError

#: Anything that looks like an API key is masked before a line is written. This is the second
#: line of defence: keys are never passed to a logger on purpose, and aiohttp's access log is
#: off (it would print the stream's ``?key=`` query string); ours (requestlog.py) never does.
_KEY_RE = re.compile(r"tw_(live|test)_[A-Za-z0-9_\-]{8,}")

#: The id of the request being handled (set by the request log, see :mod:`..http.requestlog`).
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

#: INFO lines wait at most this long (or until this many bytes are pending) before being written.
FLUSH_AFTER_S = 0.05
FLUSH_BYTES = 64 * 1024


#: The ids (trace_id, span_id) of the span current where a line is written, or None; set by the
#: tracing room while tracing is on (this room never imports it).
_trace_ids: Callable[[], tuple[str, str] | None] | None = None


def in_span() -> bool:
    """Whether a line written now would carry a span's ids."""
    return _trace_ids is not None and _trace_ids() is not None


def set_trace_ids(hook: Callable[[], tuple[str, str] | None] | None) -> None:
    """Install (None: remove) what gives every log line written inside a span its ids."""
    global _trace_ids
    _trace_ids = hook


def redact(text: str) -> str:
    return _KEY_RE.sub(lambda m: f"tw_{m.group(1)}_***", text) if "tw_" in text else text


class RequestIdFilter(logging.Filter):
    """Adds the current request's id to every log record written while it is handled."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        if rid is not None:
            record.request_id = rid
        return True


_second: tuple[int, str] = (-1, "")  # the whole second last formatted, and its text


def iso_ms(created: float) -> str:
    """``created`` (epoch seconds) as ISO 8601 UTC with milliseconds; the date and time of day
    are formatted once per second."""
    global _second
    ms = int(created * 1000)
    second, text = _second
    if ms // 1000 != second:
        second = ms // 1000
        text = datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        _second = (second, text)
    return f"{text}.{ms % 1000:03d}+00:00"


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def line(
        self,
        created: float,
        level: str,
        logger: str,
        msg: str,
        request_id: str | None,
        fields: Any,
        exc: str | None = None,
        stack: str | None = None,
    ) -> str:
        doc = {"ts": iso_ms(created), "level": level, "service": self.service, "logger": logger, "msg": msg}
        if request_id is not None:
            doc["request_id"] = request_id
        if _trace_ids is not None and (ids := _trace_ids()) is not None:
            doc["trace_id"], doc["span_id"] = ids
        if isinstance(fields, dict):
            doc.update(fields)
        if exc:
            doc["exc"] = exc
        if stack:
            doc["stack"] = stack
        # Redact the finished line: message, extra fields at any depth, tracebacks. Key
        # characters are all JSON-safe, so a key reads the same inside the serialized line.
        return redact(orjson.dumps(doc, default=str).decode())

    def format(self, record: logging.LogRecord) -> str:
        return self.line(
            record.created,
            record.levelname.lower(),
            record.name,
            record.getMessage(),
            getattr(record, "request_id", None),
            getattr(record, "fields", None),
            self.formatException(record.exc_info) if record.exc_info else None,
            self.formatStack(record.stack_info) if record.stack_info else None,
        )


class LineHandler(logging.StreamHandler):
    """A stream handler that gathers INFO (and lower) lines written from an event loop's thread
    and writes them together; see the module's docstring."""

    def __init__(self, stream: TextIO, formatter: JsonFormatter) -> None:
        super().__init__(stream)
        self.setFormatter(formatter)
        self.json = formatter
        self._pending: list[str] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:  # called with the handler's lock held
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self._add(line, urgent=record.levelno >= logging.WARNING)

    def write_line(self, line: str) -> None:
        """Write a formatted INFO line (not through ``emit``)."""
        self.acquire()
        try:
            self._add(line, urgent=False)
        finally:
            self.release()

    def _add(self, line: str, urgent: bool) -> None:
        self._pending.append(line)
        self._size += len(line)
        if urgent or self._size >= FLUSH_BYTES:
            self._write_pending()
            return
        if self._timer is not None and self._timer_loop is not None and self._timer_loop.is_running():
            return  # the timer set for an earlier line writes this one too
        loop = asyncio._get_running_loop()  # a system call (getpid) on Python 3.11: once per timer
        if loop is None:  # no event loop in this thread: nothing would write the buffer later
            self._write_pending()
        else:
            if self._timer is not None:  # set on a loop that has stopped since: it never fires
                self._timer.cancel()
            self._timer = loop.call_later(FLUSH_AFTER_S, self.flush)
            self._timer_loop = loop

    def _write_pending(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        text = "\n".join(self._pending) + "\n"
        self._pending.clear()
        self._size = 0
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:  # like StreamHandler: a broken stream must not take the process down
            self.handleError(logging.makeLogRecord({"msg": "log lines lost"}))

    def flush(self) -> None:
        self.acquire()
        try:
            self._write_pending()
        finally:
            self.release()


def info_line(logger: logging.Logger, msg: str, fields: dict) -> None:
    """``logger.info(msg, extra={"fields": fields})``, written without a ``LogRecord`` (a fraction
    of the cost) when the process logs through one :class:`LineHandler` alone (:func:`setup_logging`)."""
    handlers = logging.root.handlers
    if (
        len(handlers) != 1
        or type(handlers[0]) is not LineHandler
        or logger.handlers
        or not logger.isEnabledFor(logging.INFO)
    ):
        logger.info(msg, extra={"fields": fields})
        return
    handler = handlers[0]
    handler.write_line(handler.json.line(time.time(), "info", logger.name, msg, REQUEST_ID.get(), fields))


LOG_BURST = 10
LOG_PER_SECOND = 1.0


class LogLimiter:
    """A token bucket for log lines: ``allow()`` returns how many lines were suppressed since
    the last allowed one, or None when this line must be suppressed too."""

    def __init__(self, burst: int = LOG_BURST, per_second: float = LOG_PER_SECOND, clock=time.monotonic) -> None:
        self.burst = burst
        self.per_second = per_second
        self.clock = clock
        self.tokens = float(burst)
        self.last = clock()
        self.suppressed = 0

    def allow(self) -> int | None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.per_second)
        self.last = now
        if self.tokens < 1:
            self.suppressed += 1
            return None
        self.tokens -= 1
        suppressed, self.suppressed = self.suppressed, 0
        return suppressed


class LibraryFloodFilter(logging.Filter):
    """At most :data:`LOG_BURST` lines, then one per second, from the loggers under ``prefix``
    (aiokafka logs about a hundred ERROR lines a second per process while a broker refuses
    connections); the line that passes after a pause says how many were suppressed. The
    library's lines say nothing our own do not (the services log each outage, its cause and its
    end once, and readiness and metrics carry the state)."""

    def __init__(self, prefix: str, limiter: LogLimiter | None = None) -> None:
        super().__init__()
        self.prefix = prefix
        self.limiter = limiter or LogLimiter()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefix):
            return True
        suppressed = self.limiter.allow()
        if suppressed is None:
            return False
        if suppressed:
            fields = getattr(record, "fields", None)
            record.fields = {**(fields if isinstance(fields, dict) else {}), "suppressed": suppressed}
        return True


class ExpectedFaultTracebacks(logging.Filter):
    """One line, not a traceback, for what libraries log about faults we expect and handle: an
    outage is an operator's business, a traceback says "a bug" (docs/operations.md).

    - asyncpg's warnings with a traceback ("Failed to restore the pool connection floor;
      retrying", every few seconds per process while PostgreSQL is down): the exception is
      folded into the line.
    - asyncio's "Task exception was never retrieved" for asyncpg's own task that hands a
      connection back after a statement timed out (MagicStack/asyncpg#1326): a WARNING line
      saying so; the pool replaces the connection.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # asyncio's default exception handler logs with ``exc_info=False`` when there is no
        # exception: only a (type, value, traceback) tuple holds one.
        if not isinstance(record.exc_info, tuple) or record.exc_info[1] is None:
            return True
        if record.name.startswith("asyncpg") and record.levelno < logging.ERROR:
            _fold(record, record.getMessage())
        elif record.name == "asyncio" and "PoolConnectionHolder.release" in str(record.msg):
            _fold(
                record,
                "asyncpg could not hand back a connection after a statement timed out "
                "(MagicStack/asyncpg#1326); the pool replaces it",
            )
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class RetriedLibraryErrors(logging.Filter):
    """A WARNING, not an ERROR, for what a library logs at ERROR and then retries on its own:
    aiokafka's "Group Coordinator Request failed" with a retriable error (a fresh or restarted
    broker still loading its group coordinator answers so for a second or two). The join it
    delays is watched by the projector, which logs an ERROR of its own and turns unready when
    a join does not finish (``TICKERWIRE_PROJECTOR_GROUP_JOIN_TIMEOUT_S``): an ERROR line
    says that something needs an operator, and a retry that succeeds needs none."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.levelno == logging.ERROR
            and record.name == "aiokafka.consumer.group_coordinator"
            and str(record.msg).startswith("Group Coordinator Request failed")
            and isinstance(record.args, tuple)
            and record.args
            and getattr(record.args[0], "retriable", False)
        ):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _fold(record: logging.LogRecord, text: str) -> None:
    exc = record.exc_info[1] if record.exc_info else None
    record.msg = f"{text}: {type(exc).__name__}: {exc}" if str(exc) else f"{text}: {type(exc).__name__}"
    record.args = None
    record.exc_info = None
    record.exc_text = None


def setup_logging(service: str, level: str = "INFO") -> None:
    if not isinstance(logging.getLevelName(level.upper()), int):
        raise ConfigError(f"TICKERWIRE_LOG_LEVEL={level!r} is invalid: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    handler = LineHandler(sys.stderr, JsonFormatter(service))
    handler.addFilter(RequestIdFilter())
    handler.addFilter(LibraryFloodFilter("aiokafka"))
    handler.addFilter(LibraryFloodFilter("asyncpg"))
    handler.addFilter(ExpectedFaultTracebacks())
    handler.addFilter(RetriedLibraryErrors())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # warnings too go through the formatter (and its redaction)
    # aiohttp's access log would print query strings (the stream's key); our middleware logs instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
