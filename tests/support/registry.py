"""A schema registry stub for tests only: the few routes of Confluent's REST API that its
serializers and Tickerwire's lookup use (register a schema under a subject, read a schema by
id), on a real HTTP listener in a thread, so a synchronous serializer can call it too."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import orjson


@dataclass
class RegistryState:
    schemas: dict[int, str] = field(default_factory=dict)
    #: Every path asked, in order (lookups are counted from it).
    asked: list[str] = field(default_factory=list)
    #: An HTTP status every request gets instead (an outage), or None.
    failing: int | None = None

    def register(self, schema: str) -> int:
        for schema_id, known in self.schemas.items():
            if known == schema:
                return schema_id
        schema_id = 100 + len(self.schemas)
        self.schemas[schema_id] = schema
        return schema_id


def _handler(state: RegistryState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _answer(self, status: int, doc: object) -> None:
            body = orjson.dumps(doc)
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            state.asked.append(self.path)
            path = self.path.split("?", 1)[0]
            if state.failing is not None:
                return self._answer(state.failing, {"error_code": state.failing, "message": "down"})
            if path.startswith("/schemas/ids/") and path.rsplit("/", 1)[1].isdigit():
                schema_id = int(path.rsplit("/", 1)[1])
                if schema_id in state.schemas:
                    return self._answer(200, {"schema": state.schemas[schema_id], "schemaType": "JSON"})
                return self._answer(404, {"error_code": 40403, "message": "Schema not found"})
            self._answer(404, {"error_code": 404, "message": "not found"})

        def do_POST(self) -> None:
            state.asked.append(self.path)
            body = orjson.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            path = self.path.split("?", 1)[0]
            if path.startswith("/subjects/") and path.endswith("/versions"):
                schema_id = state.register(body["schema"])
                return self._answer(200, {"id": schema_id})
            self._answer(404, {"error_code": 404, "message": "not found"})

    return Handler


@contextlib.contextmanager
def registry_stub() -> Iterator[tuple[str, RegistryState]]:
    """The stub's URL and state, for the length of the block."""
    state = RegistryState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
