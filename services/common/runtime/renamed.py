"""Settings that were replaced: a deployment still setting the old name is stopped, not ignored."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ConfigError

#: The old variable: the one that replaced it, and why.
RENAMED = {
    "TICKERWIRE_PROJECTOR_PORT": ("TICKERWIRE_PROJECTOR_ADMIN_PORT", "an admin listener: /healthz, /readyz, /metrics"),
    "TICKERWIRE_WEBHOOKS_ALLOW_PRIVATE_TARGETS": (
        "TICKERWIRE_WEBHOOKS_OPEN_TARGETS",
        "it names what it opens to webhooks: loopback, or CIDR ranges; never every address",
    ),
}


def refuse_renamed(env: Mapping[str, str]) -> None:
    """ConfigError, in one line, when ``env`` still sets a replaced variable."""
    for old, (new, why) in RENAMED.items():
        if env.get(old):
            raise ConfigError(f"{old} was replaced by {new} ({why}); set that instead")


def renamed_markdown() -> str:
    return "; ".join(f"`{old}` was replaced by `{new}` ({why})" for old, (new, why) in RENAMED.items())
