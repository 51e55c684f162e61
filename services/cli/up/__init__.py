"""``tickerwire up``: the whole system on one machine, embedded unless configured (its command,
the embedded servers and the broker it starts, the service children, the demo data and trickle,
the supervision that keeps them running, the failover of its PostgreSQL, and ``up.json``)."""

from .command import up_main

__all__ = ["up_main"]
