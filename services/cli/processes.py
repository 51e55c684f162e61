"""``tickerwire projector | api | stream | dispatcher``: run one service process, and the
projector's one-off actions (``projector rebuild``, ``projector accept-log``)."""

from __future__ import annotations

import argparse

from .running import cli_config


def _service(name: str):
    def run(args: argparse.Namespace) -> int:
        from ..common.runtime.process import run_service

        if name == "projector":
            if getattr(args, "action", None) == "rebuild":
                from ..projector.rebuild import rebuild_main

                return rebuild_main(cli_config())
            if getattr(args, "action", None) == "accept-log":
                from ..projector.accept import accept_log_main

                return accept_log_main(cli_config(), args.start_from)
            from ..projector.app import serve as projector

            return run_service(name, projector, cli_config())
        if name == "api":
            from ..api.app import serve as api

            return run_service(name, api, cli_config())
        if name == "dispatcher":
            from ..webhooks.app import serve as dispatcher

            return run_service(name, dispatcher, cli_config())
        from ..stream.app import serve as stream

        return run_service(name, stream, cli_config())

    return run


def register(sub) -> None:
    proj = sub.add_parser("projector", help="run the projector (the only writer of the read model)")
    proj.add_argument(
        "action",
        nargs="?",
        choices=["run", "rebuild", "accept-log"],
        default="run",
        help="run (default); rebuild the read model from the log; accept-log: move stored positions "
        "the log no longer holds (after a log reset) to its start or end",
    )
    proj.add_argument(
        "--from",
        dest="start_from",
        choices=["earliest", "latest"],
        default="earliest",
        help="accept-log: re-read from the log start (default) or skip to its end",
    )
    proj.set_defaults(func=_service("projector"))
    sub.add_parser("api", help="run the read API").set_defaults(func=_service("api"))
    sub.add_parser("stream", help="run the WebSocket stream").set_defaults(func=_service("stream"))
    sub.add_parser("dispatcher", help="run the webhook dispatcher (docs/webhooks.md)").set_defaults(
        func=_service("dispatcher")
    )
