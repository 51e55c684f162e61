"""What the trace viewer's tests share: the Phoenix install (installed first when this machine has
none: minutes), the addresses a process listens on, one span sent as the services send theirs,
and a lookup of one trace's spans in Phoenix's own REST API."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import time
import urllib.request
from pathlib import Path

from tickerwire.devstack.embedded.phoenix_install import ensure_installed

#: The project Phoenix files spans under when their resource names none.
PROJECT = "default"


def phoenix_install() -> Path:
    """Phoenix's environment, installed first into ``$TICKERWIRE_PHOENIX_HOME`` or the cache when
    it is not there (about 3 minutes and 860 MB)."""
    return ensure_installed()


def _hex_address(field: str) -> tuple[str, int]:
    address, port = field.rsplit(":", 1)
    raw = bytes.fromhex(address)
    # /proc writes each 32-bit word in host (little-endian) order.
    packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(packed)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a v6 socket bound to ::ffff:a.b.c.d takes only a.b.c.d
    return str(ip), int(port, 16)


def listeners_of(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every listening TCP socket process ``pid`` holds (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    found.append(_hex_address(fields[1]))
    return sorted(found)


def send_span(otlp_endpoint: str, name: str) -> tuple[str, str]:
    """One span sent with the OpenTelemetry SDK's OTLP/HTTP (protobuf) exporter, as the services
    send theirs; its trace id and span id in hex."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "tickerwire-test"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp_endpoint}/v1/traces", timeout=5)))
    try:
        with provider.get_tracer("tests").start_as_current_span(name) as span:
            context = span.get_span_context()
    finally:
        provider.shutdown()
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def spans_of(viewer_url: str, trace_id: str, timeout: float = 0.0) -> list[dict]:
    """The spans of trace ``trace_id`` as Phoenix's REST API gives them
    (``/v1/projects/default/spans?trace_id=``), waiting up to ``timeout`` seconds for some to
    arrive (Phoenix writes them in batches); [] when none does."""
    deadline = time.monotonic() + timeout
    url = f"{viewer_url}/v1/projects/{PROJECT}/spans?trace_id={trace_id}"
    while True:
        with urllib.request.urlopen(url, timeout=5.0) as answer:
            found = json.loads(answer.read())["data"]
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.25)
