"""The settings of webhook endpoint changes, read by every process that makes them: the
dispatcher (which signs with the key and checks every connection against the address rules),
the API (the partner's changes, docs/api.md#managing-endpoints) and ``tickerwire webhooks``."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.http.signing import parse_signing_key
from ..common.http.targets import OpenTargets
from ..common.runtime.config import Config, option
from ..common.runtime.errors import ConfigError


@dataclass(frozen=True)
class EndpointSettings(Config):
    """The signing key, the address policy and the rotation window of webhook endpoints."""

    webhooks_signing_key: str = option(
        "",
        "base64 of at least 32 random bytes: every endpoint's signing secret is derived from it, the "
        "endpoint id and its secret generation (required by the dispatcher, by `webhooks register` "
        "and `rotate-secret`, and by the API's endpoint changes, which answer 503 without it)",
        secret=True,
    )
    webhooks_open_targets: str = option(
        "",
        "non-public addresses opened to endpoint URLs, comma-separated: `loopback` (127.0.0.0/8 and ::1) "
        "or CIDR ranges, none wider than a /8 (IPv4) or /32 (IPv6), none holding a cloud metadata "
        "address; empty: public addresses only (`tickerwire up` opens loopback)",
    )
    webhooks_rotation_window_s: float = option(
        86_400.0, "after a secret rotation, the previous secret also signs for this long"
    )

    def check(self) -> None:
        super().check()
        if self.webhooks_signing_key:
            try:
                parse_signing_key(self.webhooks_signing_key)
            except ValueError as e:
                raise ConfigError(f"TICKERWIRE_WEBHOOKS_SIGNING_KEY: {e}") from None
        try:
            self.open_targets()
        except ValueError as e:
            raise ConfigError(f"TICKERWIRE_WEBHOOKS_OPEN_TARGETS: {e}") from None

    def open_targets(self) -> OpenTargets:
        """The non-public addresses opened to endpoint URLs (ValueError: not a valid setting)."""
        return OpenTargets.parse(self.webhooks_open_targets)

    def signing_key(self) -> bytes:
        """The signing key; ConfigError naming the setting when it is not set."""
        if not self.webhooks_signing_key:
            raise ConfigError(
                "TICKERWIRE_WEBHOOKS_SIGNING_KEY is not set: generate one with "
                "`python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())'`"
            )
        return parse_signing_key(self.webhooks_signing_key)
