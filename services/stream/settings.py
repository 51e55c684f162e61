"""The stream's settings: the shared contract (:class:`..common.runtime.config.Config`) and its own."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.runtime.config import Config, option
from ..common.runtime.errors import ConfigError


@dataclass(frozen=True)
class StreamConfig(Config):
    """What a stream process reads: the shared settings and these, its own."""

    stream_port: int = option(8081, "partner port of the stream")
    stream_admin_port: int = option(9081, "admin port of the stream")
    stream_ping_interval_s: float = option(30.0, "the stream's `ping` message interval")
    stream_heartbeat_s: float = option(
        60.0,
        "a WebSocket ping frame this often; a connection that answers neither it nor anything else "
        "within half of it is closed (1006), freeing its slot",
    )
    # Always without server context takeover: each message is compressed once per window size and
    # the same frame goes to every such connection, at no measurable CPU or memory per connection
    # (docs/operations.md).
    stream_compress: bool = option(
        True,
        "accept permessage-deflate from stream clients that offer it, each message compressed once "
        "(a post.created in about 180 bytes instead of about 680)",
    )
    stream_queue_size: int = option(256, "messages buffered per stream connection before it is closed as slow", least=1)
    stream_max_pending: int = option(
        50_000,
        "post records a stream process holds while waiting for the projector to commit them; at this "
        "many it pauses reading the log until half are announced",
        least=1,
    )
    stream_max_connections_per_workspace: int = option(
        5, "default concurrent stream connections of a workspace", least=1
    )
    stream_lease_ttl_s: float = option(
        10.0, "a stream connection's slot lease expires this long after its last renewal"
    )
    stream_lease_renew_s: float = option(
        3.0, "each stream process renews its leases this often (below the lease's TTL)"
    )
    stream_access_recheck_s: float = option(
        1.0,
        "the stream re-checks the access of its open connections at least this often (and after every access change)",
    )

    def check(self) -> None:
        super().check()
        if not 0 < self.stream_lease_renew_s < self.stream_lease_ttl_s:
            raise ConfigError(
                "TICKERWIRE_STREAM_LEASE_RENEW_S must be positive and below TICKERWIRE_STREAM_LEASE_TTL_S "
                f"({self.stream_lease_renew_s:g} and {self.stream_lease_ttl_s:g}): a lease must be renewed before it expires"
            )
