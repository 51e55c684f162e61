"""One delivery attempt over HTTP (docs/webhooks.md#retries): a POST of the exact body bytes
with the Standard Webhooks headers, bounded in time, never following a redirect, reading at
most :data:`EXCERPT_BYTES` of the answer's body (the attempt log's ``response_excerpt``), and never reaching an address the endpoint may not
(:mod:`..common.http.targets`, checked again at connect time)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from ..common.http.targets import GuardedResolver, OpenTargets, TargetRefused, check_literal
from .schedule import AttemptResult, outcome_of, parse_retry_after

#: The most of a response body read (and kept in the attempt log): the rest is never read, and
#: the connection of an answer not read to its end is closed.
EXCERPT_BYTES = 1_024
#: The most of an answer buffered below the reader at once (aiohttp's read buffer).
READ_BUFFER_BYTES = 4_096
#: The most of an error kept in the attempt log.
MAX_ERROR_CHARS = 200
USER_AGENT = "Tickerwire-Webhooks/1"


class Sender:
    """An HTTP client shared by every endpoint of a process: one connection per endpoint at most
    (each has one request in flight), ``max_connections`` in all."""

    def __init__(self, *, timeout_s: float, max_connections: int, opened: OpenTargets) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._opened = opened
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, resolver=GuardedResolver(opened), ttl_dns_cache=10),
            auto_decompress=False,
            read_bufsize=READ_BUFFER_BYTES,
            headers={"User-Agent": USER_AGENT},
        )

    async def close(self) -> None:
        await self._session.close()

    async def attempt(self, url: str, headers: dict[str, str], body: bytes) -> AttemptResult:
        started = time.monotonic()
        try:
            check_literal(url, opened=self._opened)
            async with self._session.post(
                url,
                data=body,
                headers={**headers, "Content-Type": "application/json"},
                allow_redirects=False,
                timeout=self._timeout,
            ) as response:
                answer = await excerpt(response.content)
                latency = time.monotonic() - started
                outcome = outcome_of(response.status)
                text = answer.decode("utf-8", "replace")
                if outcome == "delivered":
                    return AttemptResult("delivered", response.status, latency, excerpt=text)
                retry_after = (
                    parse_retry_after(response.headers.get("Retry-After")) if response.status in (429, 503) else None
                )
                error = f"HTTP {response.status} {response.reason or ''}".strip()
                if answer:
                    error += ": " + text
                return AttemptResult(outcome, response.status, latency, error[:MAX_ERROR_CHARS], retry_after, text)
        except TargetRefused as e:
            return AttemptResult("refused", None, time.monotonic() - started, str(e)[:MAX_ERROR_CHARS])
        except asyncio.TimeoutError:
            return AttemptResult(
                "failed", None, time.monotonic() - started, f"no answer within {self._timeout.total:g} s"
            )
        except (aiohttp.ClientError, OSError) as e:
            cause = e.__cause__ if isinstance(e.__cause__, TargetRefused) else e
            outcome = "refused" if isinstance(cause, TargetRefused) else "failed"
            text = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
            return AttemptResult(outcome, None, time.monotonic() - started, text[:MAX_ERROR_CHARS])


async def excerpt(content: aiohttp.StreamReader) -> bytes:
    """At most the first :data:`EXCERPT_BYTES` of a body (fewer when it ends first)."""
    parts: list[bytes] = []
    left = EXCERPT_BYTES
    while left > 0:
        chunk = await content.read(left)
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
