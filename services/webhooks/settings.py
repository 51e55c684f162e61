"""The webhook dispatcher's settings (docs/webhooks.md): the shared contract and its own. The
operator commands that register endpoints and rotate their secrets read the signing key and the
address policy from here too."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from ..common.http.signing import parse_signing_key
from ..common.http.targets import OpenTargets
from ..common.runtime.config import Config, option
from ..common.runtime.errors import ConfigError


@dataclass(frozen=True)
class WebhooksConfig(Config):
    """What a dispatcher process reads: the shared settings and these, its own."""

    webhooks_admin_port: int = option(9083, "admin port of the webhook dispatcher (its only listener)")
    webhooks_signing_key: str = option(
        "",
        "base64 of at least 32 random bytes: every endpoint's signing secret is derived from it, the "
        "endpoint id and its secret generation (required by the dispatcher and by `webhooks register` "
        "and `rotate-secret`)",
        secret=True,
    )
    webhooks_open_targets: str = option(
        "",
        "non-public addresses opened to endpoint URLs, comma-separated: `loopback` (127.0.0.0/8 and ::1) "
        "or CIDR ranges, none wider than a /8 (IPv4) or /32 (IPv6), none holding a cloud metadata "
        "address; empty: public addresses only (`tickerwire up` opens loopback)",
    )
    webhooks_retry_scale: float = option(
        1.0,
        "multiplies every delay of the retry schedule and the disabling time (tests compress them)",
    )
    webhooks_attempt_timeout_s: float = option(10.0, "bound of one delivery attempt, connect to response read")
    webhooks_disable_after_s: float = option(
        432_000.0, "an endpoint failing for this long (5 days, times the retry scale) is disabled"
    )
    webhooks_rotation_window_s: float = option(
        86_400.0, "after a secret rotation, the previous secret also signs for this long"
    )
    webhooks_max_endpoints: int = option(
        1_000, "endpoints one dispatcher process delivers to at once (each with one request in flight)", least=1
    )
    webhooks_message_retention_s: float = option(
        604_800.0,
        "a message's body is kept this long after its first attempt (7 days; longer while it is being "
        "retried): every attempt and replay within it sends the same bytes under the same webhook-id",
    )
    webhooks_lease_ttl_s: float = option(
        30.0,
        "a dispatcher's hold on an endpoint expires this long after its last renewal (at least twice "
        "the attempt timeout and a second)",
    )

    def check(self) -> None:
        super().check()
        if self.webhooks_signing_key:
            try:
                parse_signing_key(self.webhooks_signing_key)
            except ValueError as e:
                raise ConfigError(f"TICKERWIRE_WEBHOOKS_SIGNING_KEY: {e}") from None
        if self.webhooks_lease_ttl_s < 2 * self.webhooks_attempt_timeout_s + 1:
            raise ConfigError(
                "TICKERWIRE_WEBHOOKS_LEASE_TTL_S must be at least twice TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S "
                f"and a second ({self.webhooks_lease_ttl_s:g} and {self.webhooks_attempt_timeout_s:g}): an attempt "
                "starts only while the lease outlasts it"
            )
        try:
            self.open_targets()
        except ValueError as e:
            raise ConfigError(f"TICKERWIRE_WEBHOOKS_OPEN_TARGETS: {e}") from None
        if not 0 < self.webhooks_retry_scale <= 1:
            raise ConfigError("TICKERWIRE_WEBHOOKS_RETRY_SCALE must be above 0 and at most 1")

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


def new_signing_key() -> str:
    """A fresh signing key's text (what `tickerwire up` generates for its state directory)."""

    return base64.b64encode(os.urandom(32)).decode()
