"""The webhook dispatcher's settings (docs/webhooks.md): the shared contract, the settings of
endpoint changes (the signing key, the address policy, the rotation window) and its own."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from ..common.runtime.config import option
from ..common.runtime.errors import ConfigError
from ..readmodel.endpoint_settings import EndpointSettings


@dataclass(frozen=True)
class WebhooksConfig(EndpointSettings):
    """What a dispatcher process reads: the shared settings, those of endpoint changes
    (:class:`..readmodel.endpoint_settings.EndpointSettings`) and these, its own."""

    webhooks_admin_port: int = option(9083, "admin port of the webhook dispatcher (its only listener)")
    webhooks_retry_scale: float = option(
        1.0,
        "multiplies every delay of the retry schedule and the disabling time (tests compress them)",
    )
    webhooks_attempt_timeout_s: float = option(10.0, "bound of one delivery attempt, connect to response read")
    webhooks_disable_after_s: float = option(
        432_000.0, "an endpoint failing for this long (5 days, times the retry scale) is disabled"
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
        if self.webhooks_lease_ttl_s < 2 * self.webhooks_attempt_timeout_s + 1:
            raise ConfigError(
                "TICKERWIRE_WEBHOOKS_LEASE_TTL_S must be at least twice TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S "
                f"and a second ({self.webhooks_lease_ttl_s:g} and {self.webhooks_attempt_timeout_s:g}): an attempt "
                "starts only while the lease outlasts it"
            )
        if not 0 < self.webhooks_retry_scale <= 1:
            raise ConfigError("TICKERWIRE_WEBHOOKS_RETRY_SCALE must be above 0 and at most 1")


def new_signing_key() -> str:
    """A fresh signing key's text (what `tickerwire up` generates for its state directory)."""

    return base64.b64encode(os.urandom(32)).decode()
