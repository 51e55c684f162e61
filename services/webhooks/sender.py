"""One delivery attempt over HTTP (docs/webhooks.md#retries): a POST of the exact body bytes
with the Standard Webhooks headers, bounded in time, never following a redirect, reading at
most :data:`MAX_RESPONSE_BYTES` of the answer, and never reaching an address the endpoint may not
(:mod:`..common.http.targets`, checked again at connect time)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from ..common.http.targets import GuardedResolver, OpenTargets, TargetRefused, check_literal
from .schedule import AttemptResult, outcome_of, parse_retry_after

#: The most of a response body read (and kept, shortened, in the attempt log).
MAX_RESPONSE_BYTES = 4_096
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
                answer = await response.content.read(MAX_RESPONSE_BYTES)
                latency = time.monotonic() - started
                outcome = outcome_of(response.status)
                if outcome == "delivered":
                    return AttemptResult("delivered", response.status, latency)
                retry_after = (
                    parse_retry_after(response.headers.get("Retry-After")) if response.status in (429, 503) else None
                )
                error = f"HTTP {response.status} {response.reason or ''}".strip()
                if answer:
                    error += ": " + answer.decode("utf-8", "replace")
                return AttemptResult(outcome, response.status, latency, error[:MAX_ERROR_CHARS], retry_after)
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
