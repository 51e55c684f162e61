"""The API's settings: the shared contract (:class:`..common.runtime.config.Config`), the settings
of endpoint changes and its own."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.runtime.config import option
from ..common.runtime.errors import ConfigError
from ..readmodel.endpoint_settings import EndpointSettings


@dataclass(frozen=True)
class ApiConfig(EndpointSettings):
    """What a API process reads: the shared settings, those of endpoint changes (the partner's
    changes of its webhook endpoints, docs/api.md#managing-endpoints) and these, its own."""

    api_port: int = option(8080, "partner port of the API")
    api_admin_port: int = option(9080, "admin port of the API")
    default_rate_limit_per_minute: int = option(60, "requests per minute of a workspace that sets none", least=0)
    default_daily_quota: int = option(5_000, "requests per UTC day of a workspace that sets none", least=0)
    console_stream_url: str = option(
        "",
        "the stream's public URL (`wss://host/.../stream`) the partner console's live view connects to; "
        "empty: no live view",
    )

    def check(self) -> None:
        super().check()
        if self.console_stream_url and not self.console_stream_url.startswith(("ws://", "wss://")):
            raise ConfigError(
                f"TICKERWIRE_CONSOLE_STREAM_URL must be a ws:// or wss:// URL; got {self.console_stream_url[:80]!r}"
            )
