"""HTTP over a bare socket, for requests no HTTP client would send."""

from __future__ import annotations

import asyncio


async def raw(port: int, request: bytes, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is; returns (status, lower-cased headers, body) of the answer
    (its Content-Length, else up to the end of the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=timeout)
        lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if "content-length" in headers:
            body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout=timeout)
        else:
            body = await asyncio.wait_for(reader.read(), timeout=timeout)
    finally:
        writer.close()
    return int(lines[0].split()[1]), headers, body


async def raw_head(port: int, request: bytes, timeout: float = 10) -> tuple[int, dict[str, str]]:
    """Send ``request``; returns (status, lower-cased headers) of the answer's head only (for
    answers that keep the connection open, such as 101 Switching Protocols)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=timeout)
    finally:
        writer.close()
    lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers
