"""Every metric the stream exports, registered on an injectable registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class StreamMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.connections = Gauge("tickerwire_stream_connections", "Open stream connections", registry=r)
        self.access_stamp = Gauge(
            "tickerwire_access_stamp",
            "The access change stamp of the principals this process serves (-1: none yet)",
            registry=r,
        )
        self.filter_groups = Gauge(
            "tickerwire_stream_filter_groups",
            "Distinct filter sets among open connections (one match per message each)",
            registry=r,
        )
        self.feed_pending = Gauge(
            "tickerwire_stream_feed_pending",
            "Post records read from the log that wait for the projector to commit them",
            registry=r,
        )
        self.feed_paused = Gauge(
            "tickerwire_stream_feed_paused",
            "1 while the feed has stopped reading the log because TICKERWIRE_STREAM_MAX_PENDING records wait for the projector",
            registry=r,
        )
        self.feed_stopped = Gauge(
            "tickerwire_stream_feed_log_discontinuity",
            "1 while the feed is stopped because neither its positions nor the projector's are in the post log "
            "(log reset; way out: tickerwire projector accept-log)",
            registry=r,
        )
        self.feed_log_restarts = Counter(
            "tickerwire_stream_feed_log_restarts_total",
            "Post-log partitions the feed read again (from the first record not read yet) after a log reset or deleted records",
            ["partition"],
            registry=r,
        )
        self.messages_sent = Counter(
            "tickerwire_stream_messages_sent_total", "Messages written to clients", ["type"], registry=r
        )
        self.frames_built = Counter(
            "tickerwire_stream_frames_built_total",
            "Frames built from a message, by encoding (plain, deflate-<window bits>): once per message and "
            "encoding, then shared; 1 - built/sent is the share of messages written as an already built frame",
            ["encoding"],
            registry=r,
        )
        self.repeats_dropped = Counter(
            "tickerwire_stream_repeats_dropped_total",
            "post.created messages not written to a connection because it had already been sent that "
            "announcement or a later one of its partition (never sent twice nor out of order; each is "
            "logged as a WARNING: a defect upstream of the connection)",
            registry=r,
        )
        self.slow_closed = Counter(
            "tickerwire_stream_slow_clients_closed_total", "Clients closed because they stopped reading", registry=r
        )
        self.resumes = Counter(
            "tickerwire_stream_resumes_total",
            "Handshakes asking to resume from a cursor, by outcome (resumed, refused)",
            ["outcome"],
            registry=r,
        )
        self.replayed = Counter(
            "tickerwire_stream_replayed_total",
            "post.created messages replayed from the read model to resuming connections",
            registry=r,
        )
        self.refused = Counter(
            "tickerwire_stream_refused_total", "Connections refused at the handshake", ["code"], registry=r
        )
        self.closed = Counter(
            "tickerwire_stream_closed_total",
            "Connections closed by the server, by WebSocket close code",
            ["code"],
            registry=r,
        )
        self.delivery_seconds = Histogram(
            "tickerwire_stream_event_to_send_seconds",
            "From the post event's arrival at the stream process to its post.created being queued to every connection",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
