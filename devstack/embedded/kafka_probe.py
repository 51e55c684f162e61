"""Whether a port answers the Kafka protocol: one ApiVersions request, the smallest thing a Kafka
broker answers, used to tell a started broker from a process that merely holds the port."""

from __future__ import annotations

import socket
import struct

_API_VERSIONS = 18


def answers_kafka(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if ``host:port`` answers a Kafka ApiVersions (v0) request with a matching correlation id."""
    correlation_id = 0x7477  # "tw"
    client_id = b"tickerwire-probe"
    body = struct.pack(">hhih", _API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _recv_exactly(sock, 8)
    except OSError:
        return False
    return header is not None and struct.unpack(">ii", header)[1] == correlation_id


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data
