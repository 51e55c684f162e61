"""The API's settings: the shared contract (:class:`..common.runtime.config.Config`) and its own."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.runtime.config import Config, option


@dataclass(frozen=True)
class ApiConfig(Config):
    """What a API process reads: the shared settings and these, its own."""

    api_port: int = option(8080, "partner port of the API")
    api_admin_port: int = option(9080, "admin port of the API")
    default_rate_limit_per_minute: int = option(60, "requests per minute of a workspace that sets none", least=0)
    default_daily_quota: int = option(5_000, "requests per UTC day of a workspace that sets none", least=0)
