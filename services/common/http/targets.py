"""Which addresses a webhook may reach (docs/webhooks.md#endpoints): only public ones.

An endpoint URL is the partner's choice, so a request to it must never reach our own network:
a host that is, or resolves to, a loopback, private, link-local (which includes the cloud
metadata address 169.254.169.254), shared (100.64/10), multicast, reserved or unspecified
address is refused, at registration and again at every connection (:class:`GuardedResolver`:
DNS may change between the two). An operator may allow such addresses
(``TICKERWIRE_WEBHOOKS_ALLOW_PRIVATE_TARGETS``: the tests and ``tickerwire up`` do).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

#: The longest endpoint URL accepted.
MAX_URL_LENGTH = 2048


class TargetRefused(Exception):
    """The URL or an address it resolves to may not be reached; the message says why."""


def address_refusal(address: str) -> str | None:
    """What kind of address this is when a request may not go to it ("a loopback address"), or
    None when it is a public one."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, hit in (
        ("a loopback address", ip.is_loopback),
        ("a link-local address (the cloud metadata address is one)", ip.is_link_local),
        ("an unspecified address", ip.is_unspecified),
        ("a private address", ip.is_private),
        ("a multicast address", ip.is_multicast),
        ("a reserved address", ip.is_reserved),
    ):
        if hit:
            return kind
    return None if ip.is_global else "not a public address"


def host_and_port(url: str) -> tuple[str, int]:
    """The host and port of an endpoint URL; :class:`TargetRefused` for one that is not http(s)."""
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("the URL must be http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the URL must not carry a user name or password")
    if not parts.hostname:
        raise TargetRefused("the URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise TargetRefused(f"the URL's port is not valid: {e}") from e
    return parts.hostname, port


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_literal(url: str, *, allow_private: bool) -> None:
    """Refuse (:class:`TargetRefused`) a URL whose host is an IP literal that may not be reached:
    the connect-time check of the hosts no resolver sees."""
    host, _ = host_and_port(url)
    if not allow_private and _is_literal(host) and (why := address_refusal(host)) is not None:
        raise TargetRefused(f"{host} is {why}")


async def check_url(url: str, *, allow_private: bool, timeout_s: float = 5.0) -> None:
    """Refuse (:class:`TargetRefused`) a URL that is not http(s), or whose host is or resolves to
    an address that may not be reached (unless ``allow_private``), or does not resolve."""
    host, port = host_and_port(url)
    if allow_private:
        return
    if _is_literal(host):
        if (why := address_refusal(host)) is not None:
            raise TargetRefused(f"{host} is {why}")
        return
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, asyncio.TimeoutError) as e:
        raise TargetRefused(f"{host} does not resolve: {e or 'timed out'}") from e
    for info in infos:
        if (why := address_refusal(str(info[4][0]))) is not None:
            raise TargetRefused(f"{host} resolves to {info[4][0]}, {why}")


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that answers only public addresses (all of them, or :class:`TargetRefused`):
    the check again at connect time. Hosts written as IP literals never reach a resolver in
    aiohttp, so the dispatcher checks those itself (:func:`check_url` before each attempt)."""

    def __init__(self, allow_private: bool = False) -> None:
        self._inner = DefaultResolver()
        self._allow_private = allow_private

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if self._allow_private:
            return results
        for r in results:
            if (why := address_refusal(r["host"])) is not None:
                raise TargetRefused(f"{host} now resolves to {r['host']}, {why}")
        return results

    async def close(self) -> None:
        await self._inner.close()
