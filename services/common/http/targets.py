"""Which addresses a webhook may reach (docs/webhooks.md#endpoints): only public ones.

An endpoint URL is the partner's choice, so a request to it must never reach our own network:
a host that is, or resolves to, a loopback, private, link-local (which includes the cloud
metadata address 169.254.169.254), shared (100.64/10), multicast, reserved or unspecified
address is refused, at registration and again at every connection (:class:`GuardedResolver`:
DNS may change between the two). An operator may open named ones (:class:`OpenTargets`,
``TICKERWIRE_WEBHOOKS_OPEN_TARGETS``): ``loopback``, or listed CIDR ranges, never every address
and never the cloud metadata address (``tickerwire up`` and the tests open loopback).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

#: The longest endpoint URL accepted.
MAX_URL_LENGTH = 2048


class TargetRefused(Exception):
    """The URL or an address it resolves to may not be reached; the message says why."""


#: What ``loopback`` opens.
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
#: The widest range an operator may open, by IP version: a wider one is refused as a setting.
WIDEST_PREFIX = {4: 8, 6: 32}
#: Never opened, whatever the setting: the cloud metadata addresses (AWS's IPv6 one too).
NEVER_OPENED = (ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"))


@dataclass(frozen=True)
class OpenTargets:
    """The non-public addresses an operator opened to webhooks: none by default."""

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> OpenTargets:
        """``loopback`` and CIDR ranges, comma-separated ('' opens nothing); ValueError naming
        the item that is not one, is wider than :data:`WIDEST_PREFIX` or holds a
        :data:`NEVER_OPENED` address."""
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            if item == "loopback":
                networks += LOOPBACK
                continue
            try:
                network = ipaddress.ip_network(item)
            except ValueError as e:
                raise ValueError(f"{item!r} is neither `loopback` nor a CIDR range ({e})") from None
            widest = WIDEST_PREFIX[network.version]
            if network.prefixlen < widest:
                raise ValueError(f"{item} is wider than a /{widest}: name the ranges to open, never every address")
            if held := [str(a) for a in NEVER_OPENED if a.version == network.version and a in network]:
                raise ValueError(f"{item} holds the cloud metadata address {held[0]}, which is never opened")
            networks.append(network)
        return cls(tuple(networks))

    def opens(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(ip.version == n.version and ip in n for n in self.networks)

    def __str__(self) -> str:
        return ",".join(map(str, self.networks)) or "nothing"


#: No address opened: public ones only.
PUBLIC_ONLY = OpenTargets()


def address_refusal(address: str, opened: OpenTargets = PUBLIC_ONLY) -> str | None:
    """What kind of address this is when a request may not go to it ("a loopback address"), or
    None when it is a public one or one the operator ``opened``."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if opened.opens(ip):
        return None
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
    try:
        parts = urlsplit(url)
    except ValueError as e:  # "Invalid IPv6 URL" for an unmatched bracket, a bad character after one
        raise TargetRefused(f"the URL is not valid: {e}") from e
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


def check_literal(url: str, *, opened: OpenTargets = PUBLIC_ONLY) -> None:
    """Refuse (:class:`TargetRefused`) a URL whose host is an IP literal that may not be reached:
    the connect-time check of the hosts no resolver sees."""
    host, _ = host_and_port(url)
    if _is_literal(host) and (why := address_refusal(host, opened)) is not None:
        raise TargetRefused(f"{host} is {why}")


async def check_url(url: str, *, opened: OpenTargets = PUBLIC_ONLY, timeout_s: float = 5.0) -> None:
    """Refuse (:class:`TargetRefused`) a URL that is not http(s), or whose host is or resolves to
    an address that may not be reached (public ones and those ``opened`` may), or does not resolve."""
    host, port = host_and_port(url)
    if _is_literal(host):
        if (why := address_refusal(host, opened)) is not None:
            raise TargetRefused(f"{host} is {why}")
        return
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, asyncio.TimeoutError) as e:
        raise TargetRefused(f"{host} does not resolve: {e or 'timed out'}") from e
    except UnicodeError as e:  # a label IDNA cannot encode ("\x8e"): no name a resolver could answer
        raise TargetRefused(f"{host!r} is not a valid host name ({e})") from e
    for info in infos:
        if (why := address_refusal(str(info[4][0]), opened)) is not None:
            raise TargetRefused(f"{host} resolves to {info[4][0]}, {why}")


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that answers only public or opened addresses (all of them, or :class:`TargetRefused`):
    the check again at connect time. Hosts written as IP literals never reach a resolver in
    aiohttp, so the dispatcher checks those itself (:func:`check_url` before each attempt)."""

    def __init__(self, opened: OpenTargets = PUBLIC_ONLY) -> None:
        self._inner = DefaultResolver()
        self._opened = opened

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for r in results:
            if (why := address_refusal(r["host"], self._opened)) is not None:
                raise TargetRefused(f"{host} now resolves to {r['host']}, {why}")
        return results

    async def close(self) -> None:
        await self._inner.close()
