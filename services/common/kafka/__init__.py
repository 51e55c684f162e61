"""Kafka for the services and the CLI, one module per job:

- :mod:`.clients`: building every producer, consumer and admin client (TLS, SASL, idempotent
  producers with ``acks=all``, committed records only) and saying why one cannot bootstrap;
- :mod:`.reading`: a topic's partitions, where its readable log ends, and fetching past a batch
  that cannot be decoded;
- :mod:`.sending`: sending one record under its producer span, its context in the headers;
- :mod:`.declaration` and :mod:`.topics`: the declared topics, created and compared with a cluster;
- :mod:`.probe`: whether a broker answers a Kafka request (readiness), and :mod:`.watch`, which asks it;
- :mod:`.logcheck`, :mod:`.topicgate`, :mod:`.leave`: the log's continuity, the start-up topic
  check, and a static member's leaving.

Our own producers are idempotent with ``acks=all``, as platform teams' are asked to be
(docs/publishing.md), and use no transactions (the exactly-once effect comes from positions
stored with the rows in PostgreSQL); other producers may. What callers use is named here.
"""

from __future__ import annotations

from .clients import (
    BOOTSTRAP_CAUSE,
    ISOLATION_LEVEL,
    PRODUCER_GUARANTEES,
    admin,
    consumer,
    producer,
    quiet_client_logs,
    security_options,
    started_admin,
    started_producer,
    stop_consumer,
    translate_broker_error,
    unreachable,
)
from .probe import broker_check
from .reading import CODEC, CORRUPT_BATCH, ISOLATE_S, Undecodable, decode_fault, fetch, log_end, partitions_of
from .sending import send_traced
from .topics import CREATED_VISIBLE_S, check_topics, cluster_topics, ensure_declared_before, ensure_topics

__all__ = [
    "BOOTSTRAP_CAUSE",
    "CODEC",
    "CORRUPT_BATCH",
    "CREATED_VISIBLE_S",
    "ISOLATE_S",
    "ISOLATION_LEVEL",
    "PRODUCER_GUARANTEES",
    "Undecodable",
    "admin",
    "broker_check",
    "check_topics",
    "cluster_topics",
    "consumer",
    "decode_fault",
    "ensure_declared_before",
    "ensure_topics",
    "fetch",
    "log_end",
    "partitions_of",
    "producer",
    "quiet_client_logs",
    "security_options",
    "send_traced",
    "started_admin",
    "started_producer",
    "stop_consumer",
    "translate_broker_error",
    "unreachable",
]
