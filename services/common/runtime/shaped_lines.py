"""Log lines written from a template per shape: the access log's one line per request.

A line that differs from the last of its shape only in its time, its request id and one
number is the formatter's own text for the shape with the three values put in
(:class:`ShapedLines`), so it reads byte for byte as :meth:`.logs.JsonFormatter.line` writes it,
at a fraction of the cost.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import orjson

from .logs import REQUEST_ID, JsonFormatter, LineHandler, in_span, info_line, iso_ms


class ShapedLines:
    """INFO lines of one logger whose every field but the time, the request id and the number
    ``field`` repeats: one per (method, route, status, workspace) for the access log.

    The first line of a shape goes through :meth:`JsonFormatter.line` with placeholders; the text
    around them is kept and later lines of the shape are that text with the three values put
    in, so they read exactly as the formatter would write them. Lines the template cannot
    stand for go the formatter's way: no request id, a span's ids (tracing on), another handler
    than one :class:`LineHandler`, a key-like request id (redacted). At most ``max_shapes`` are
    kept; a full table starts again empty.
    """

    _RID = "rid-placeholder-0d9f2b"
    _NUMBER = 987654321.125  # written by orjson as 987654321.125
    _NUMBER_TEXT = "987654321.125"
    _OPEN = '{"ts":"'
    _HEAD = _OPEN + iso_ms(0.0)

    def __init__(self, logger: logging.Logger, field: str, max_shapes: int = 4096) -> None:
        self.logger = logger
        self.field = field
        self.max_shapes = max_shapes
        self._shapes: dict[Any, tuple[str, str, str] | None] = {}
        self._formatter: JsonFormatter | None = None

    def write(self, shape: Any, value: float, build: Callable[[], tuple[str, dict]]) -> None:
        """One line of ``shape``; ``build()`` gives its message and fields (``field`` among them,
        at its place) when the shape is new or the line cannot use a template."""
        handlers = logging.root.handlers
        rid = REQUEST_ID.get()
        if rid is None or len(handlers) != 1 or type(handlers[0]) is not LineHandler or in_span() or "tw_" in rid:
            self._slow(build, value)
            return
        handler = handlers[0]
        if handler.json is not self._formatter:  # another process setup: other templates
            self._shapes.clear()
            self._formatter = handler.json
        if shape in self._shapes:
            parts = self._shapes[shape]
        else:
            if len(self._shapes) >= self.max_shapes:
                self._shapes.clear()
            parts = self._shapes[shape] = self._template(handler.json, *build())
        if parts is None or not self.logger.isEnabledFor(logging.INFO) or self.logger.handlers:
            self._slow(build, value)
            return
        number = orjson.dumps(value).decode()
        handler.write_line(f"{self._OPEN}{iso_ms(time.time())}{parts[0]}{rid}{parts[1]}{number}{parts[2]}")

    def _template(self, formatter: JsonFormatter, msg: str, fields: dict) -> tuple[str, str, str] | None:
        probe = dict(fields)
        probe[self.field] = self._NUMBER
        line = formatter.line(0.0, "info", self.logger.name, msg, self._RID, probe)
        if not line.startswith(self._HEAD) or line.count(self._RID) != 1 or line.count(self._NUMBER_TEXT) != 1:
            return None  # a field that contains a placeholder's text: written the long way
        head, rest = line[len(self._HEAD) :].split(self._RID)
        if self._NUMBER_TEXT not in rest:  # the number before the request id: no such shape
            return None
        middle, tail = rest.split(self._NUMBER_TEXT)
        return head, middle, tail

    def _slow(self, build: Callable[[], tuple[str, dict]], value: float) -> None:
        msg, fields = build()
        fields[self.field] = value
        info_line(self.logger, msg, fields)
