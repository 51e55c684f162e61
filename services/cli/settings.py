"""Every service's settings together: what ``tickerwire config`` lists, and what each process
checks at start-up.

One deployment sets one environment for all its processes, so a setting out of range stops
every one of them, not only the service that reads it: each process is handed this whole
configuration, and each service's code reads it through its own section's type.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.settings import ApiConfig
from ..common.runtime.config import describe as _describe, markdown as _markdown
from ..projector.settings import ProjectorConfig
from ..stream.settings import StreamConfig
from ..webhooks.settings import WebhooksConfig


@dataclass(frozen=True)
class FullConfig(WebhooksConfig, ProjectorConfig, StreamConfig, ApiConfig):
    """The shared settings, then the API's, the stream's, the projector's and the webhook dispatcher's."""


def settings_table() -> list[tuple[str, str]]:
    """(variable, default) pairs of every setting, for ``tickerwire config``."""
    return _describe(FullConfig)


def configuration_markdown() -> str:
    """docs/configuration.md."""
    return _markdown(FullConfig)
