"""An OTLP/HTTP trace sink for tests: a small aiohttp server on 127.0.0.1 that decodes each
``ExportTraceServiceRequest`` (protobuf, ``POST /v1/traces``) and keeps its spans."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable

import aiohttp
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

#: A producer's own context (a platform team's service that traces its publishing).
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PRODUCER_SPAN}-01"


def traced_env(endpoint: str, **more: str) -> dict[str, str]:
    """The environment of a process exporting to ``endpoint`` every 100 ms."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100", **more}


async def exemplar_trace_ids(admin_url: str, histogram: str) -> set[str]:
    """The ``trace_id`` of every exemplar of ``histogram``'s buckets in ``admin_url``'s ``/metrics``,
    scraped as OpenMetrics."""
    accept = {"Accept": "application/openmetrics-text; version=1.0.0, text/plain;q=0.5"}
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/metrics", headers=accept) as resp:
        assert resp.content_type == "application/openmetrics-text", resp.content_type
        text = await resp.text()
    assert text.endswith("# EOF\n")
    found = set()
    for line in text.splitlines():
        if line.startswith(histogram + "_bucket{") and ' # {trace_id="' in line:
            found.add(line.split(' # {trace_id="', 1)[1].split('"', 1)[0])
    return found


async def classic_metrics(admin_url: str) -> tuple[str, str]:
    """``/metrics`` scraped without an Accept: (content type, text)."""
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/metrics") as resp:
        return resp.content_type, await resp.text()


#: The protobuf enum's values (opentelemetry/proto/trace/v1/trace.proto, Span.SpanKind).
KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class SunkSpan:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    #: (trace_id, span_id) of each link.
    links: tuple[tuple[str, str], ...]
    attributes: dict


def _value(v) -> object:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


class OtlpSink:
    def __init__(self) -> None:
        self.spans: list[SunkSpan] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``OTEL_EXPORTER_OTLP_ENDPOINT`` for the processes under test."""
        return f"http://127.0.0.1:{self.port}"

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            attrs = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    self.spans.append(
                        SunkSpan(
                            service=str(attrs.get("service.name", "")),
                            name=s.name,
                            kind=KINDS.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def wait_for(self, match: Callable[[SunkSpan], bool], timeout: float = 20.0) -> SunkSpan:
        """The first span received that ``match`` accepts, waiting at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((s for s in self.spans if match(s)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                names = sorted({(s.service, s.name) for s in self.spans})
                raise AssertionError(f"no matching span within {timeout} s; received: {names}")
            await asyncio.sleep(0.05)
