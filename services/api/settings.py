"""The API's settings: the shared contract (:class:`..common.runtime.config.Config`), the settings
of endpoint changes and its own."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.runtime.config import option
from ..readmodel.endpoint_settings import EndpointSettings


@dataclass(frozen=True)
class ApiConfig(EndpointSettings):
    """What a API process reads: the shared settings, those of endpoint changes (the partner's
    changes of its webhook endpoints, docs/api.md#managing-endpoints) and these, its own."""

    api_port: int = option(8080, "partner port of the API")
    api_admin_port: int = option(9080, "admin port of the API")
    default_rate_limit_per_minute: int = option(60, "requests per minute of a workspace that sets none", least=0)
    default_daily_quota: int = option(5_000, "requests per UTC day of a workspace that sets none", least=0)
