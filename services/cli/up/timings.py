"""How long each step of ``tickerwire up``'s start took: said in one line once it is up, and
written to ``up.json`` (``start_seconds``), so a slow start names its slow part."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

#: The steps, in the order they run, and how the line names them.
STEPS = {
    "traces": "trace viewer (Phoenix; installed on a first start)",
    "jars": "Kafka jars checked (fetched on a first start)",
    "kafka": "Apache Kafka (JVM start and log recovery)",
    "postgres": "PostgreSQL",
    "migrations": "topics and migrations",
    "services": "services ready",
    "demo": "demo load",
}


@dataclass
class Timings:
    """Seconds spent in each step (a step run twice adds up: a replica is PostgreSQL too)."""

    started: float = field(default_factory=time.monotonic)
    seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        assert name in STEPS, name
        began = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - began

    def total(self) -> float:
        return time.monotonic() - self.started

    def as_json(self) -> dict[str, float]:
        steps = {name: round(self.seconds[name], 2) for name in STEPS if name in self.seconds}
        return {**steps, "total": round(self.total(), 2)}

    def line(self) -> str:
        parts = [f"{STEPS[name]} {self.seconds[name]:.1f} s" for name in STEPS if name in self.seconds]
        return f"started in {self.total():.1f} s: " + ", ".join(parts)
