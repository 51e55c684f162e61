"""Whether a broker works: a request of the Kafka protocol on a raw connection, for readiness."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct

from ..runtime.config import Config
from .clients import security_options

#: ApiVersions v0 (API key 18, no body), which every Kafka broker answers before any
#: authentication: a request of the protocol, not just an open socket. The kernel accepts TCP
#: connections for a broker process that is frozen or wedged; only an answer shows it works.
_PROBE_CORRELATION = 0x7477  # "tw"
_PROBE_CLIENT = b"tickerwire-readiness"
_PROBE_BODY = struct.pack(">hhih", 18, 0, _PROBE_CORRELATION, len(_PROBE_CLIENT)) + _PROBE_CLIENT
_PROBE_REQUEST = struct.pack(">i", len(_PROBE_BODY)) + _PROBE_BODY


async def _broker_answers(host: str, port: int, context: ssl.SSLContext | None) -> bool:
    """Whether the broker at host:port answers an ApiVersions request (unbounded: the caller bounds it)."""
    reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None)
    try:
        writer.write(_PROBE_REQUEST)
        await writer.drain()
        size, correlation = struct.unpack(">ii", await reader.readexactly(8))
        return size >= 4 and correlation == _PROBE_CORRELATION
    finally:
        writer.transport.abort()  # a probe: no orderly close to wait for (the peer may be frozen)


async def broker_check(config: Config, timeout_s: float = 0.8) -> tuple[bool, str]:
    """Readiness: some bootstrap server answers a Kafka request within ``timeout_s`` (all are
    asked at once, over TLS when configured)."""
    context = security_options(config).get("ssl_context")
    servers = []
    for server in config.kafka_bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        with contextlib.suppress(ValueError):
            servers.append((host.strip("[]") or "127.0.0.1", int(port)))
    probes = [asyncio.ensure_future(_broker_answers(host, port, context)) for host, port in servers]
    try:
        async with asyncio.timeout(timeout_s):
            for answered in asyncio.as_completed(probes):
                with contextlib.suppress(OSError, EOFError):  # refused, reset, TLS failure: the next one
                    if await answered:
                        return True, "ok"
    except TimeoutError:  # some server accepted the connection and said nothing
        return False, (
            f"broker at {config.kafka_bootstrap_servers} does not answer a Kafka request "
            f"within {timeout_s:g}s (accepts connections but is frozen, overloaded or not Kafka)"
        )
    finally:
        for probe in probes:
            probe.cancel()
    return False, f"broker unreachable at {config.kafka_bootstrap_servers}"
