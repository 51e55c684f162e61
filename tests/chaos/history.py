"""What a mixed-fault run saw, recorded as it happened: every operation the workload made (its
endpoint, when, how long, whether it was served), every fault the nemesis injected (a span),
every (post, locale) published and every one delivered, and every request each webhook
receiver got. The checker and the report read it;
nothing here judges."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable

from tests.support.receivers import Request
from tickerwire.schemas.models import PostEvent

#: (post id, locale): one announcement.
Key = tuple[int, str]


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of the workload: ``ok`` False is an error or a timeout (``detail`` says which)."""

    endpoint: str
    start: float
    end: float
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault: ``kind`` such as ``kill projector``; the span it lasted (a kill: until restarted)."""

    kind: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Delivery:
    """One ``post.created`` a stream client processed."""

    key: Key
    partition: int
    offset: int
    at: float
    #: Which of the client's connections it came on (1, 2, ...; 0: not a stream connection).
    connection: int = 0


@dataclass(frozen=True, slots=True)
class Hooked:
    """One request a webhook receiver got (its signature checked: ``request.answer`` says what
    the receiver answered, ``"ok"`` a 200), and when."""

    request: Request
    at: float


@dataclass(frozen=True, slots=True)
class Facts:
    """What a post's last acknowledged version says that the counters count."""

    version: int
    published_at: datetime
    sentiment: str
    tickers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A cursor the service itself issued (a stream ``ready`` or ``post.created``, a ``/changes``
    page) that it refused when a client came back with it."""

    who: str
    cursor: str
    at: float
    reason: str


#: A failover checks, as soon as the API answers, the pairs pushed in this long before the kill.
RECENT_S = 15.0


@dataclass(frozen=True, slots=True)
class Failover:
    """The times of one failover (seconds into the run): the primary killed; the standby
    promoted; the API answering ``GET /posts`` again; every service process ready; the old
    primary rebuilt and streaming as the new standby. And what partners saw of the pairs
    pushed to a stream client in the :data:`RECENT_S` before the kill (``pushed`` of them), as soon
    as the API answered: how many ``GET /posts/{id}?lang=`` did not serve (``unreadable``). After
    a ``failover lagging``, also how many of them the standby did not hold when it was promoted
    (``missing``: what the failover lost, read from the standby itself before any service could
    write to it again)."""

    killed: float
    promoted: float
    api: float
    ready: float
    rebuilt: float
    pushed: int = 0
    unreadable: int = 0
    missing: int = 0


@dataclass
class History:
    seed: int
    t0: float = field(default_factory=time.monotonic)
    #: The same instant as ``t0`` by the wall clock, to line the run up with the services' logs.
    wall_t0: float = field(default_factory=time.time)
    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    #: When the broker acknowledged the record that first made each (post, locale) visible.
    published: dict[Key, float] = field(default_factory=dict)
    #: Per visible post, its last acknowledged version's facts (what the counters must add up).
    posts: dict[int, Facts] = field(default_factory=dict)
    #: Posts only ever written in aborted transactions: never to be seen.
    aborted: set[int] = field(default_factory=set)
    #: Per stream client, what it processed, in order.
    deliveries: dict[str, list[Delivery]] = field(default_factory=lambda: defaultdict(list))
    #: What the ``/changes`` walker read, in order, with (partition, offset) from its cursor walk.
    walked: list[Key] = field(default_factory=list)
    #: Processes restarted by the supervisor: (name, when).
    restarts: list[tuple[str, float]] = field(default_factory=list)
    #: Violations seen while the run went on (a stale read, a refused resume), in order.
    violations: list[str] = field(default_factory=list)
    #: Each refusal of a cursor the service issued, in order (a client retries the same cursor).
    refusals: list[Refusal] = field(default_factory=list)
    #: Each failover the nemesis made, in order.
    failovers: list[Failover] = field(default_factory=list)
    #: Per webhook endpoint (by id), its locale filter (None: every locale).
    endpoints: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    #: Per webhook endpoint, every request its receiver got, in arrival order.
    hooked: dict[str, list[Hooked]] = field(default_factory=lambda: defaultdict(list))
    #: The capped workspace's stream connections: (opened, seen to end, client), in seconds.
    capped: list[tuple[float, float, str]] = field(default_factory=list)
    #: The capped clients' refused upgrades by status (429: every slot taken).
    capped_refusals: Counter[int] = field(default_factory=Counter)
    #: The rated workspace's requests: (started, answered, status; 0 for no answer), wall clock.
    spent: list[tuple[float, float, int]] = field(default_factory=list)

    def now(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.t0

    def op(self, endpoint: str, start: float, ok: bool, detail: str = "") -> None:
        self.ops.append(Op(endpoint, start, self.now(), ok, detail))

    def acknowledged(self, keys: Iterable[Key]) -> None:
        """The broker acknowledged records making ``keys`` visible: the first time counts."""
        acked = self.now()
        for key in keys:
            self.published.setdefault(key, acked)

    def acknowledged_posts(self, events: Iterable[PostEvent]) -> None:
        """The broker acknowledged ``events``: each post's facts and its (post, locale) pairs."""
        events = list(events)
        for e in events:
            post = e.data
            if post.id not in self.posts or self.posts[post.id].version <= e.version:
                assert post.published_at is not None
                self.posts[post.id] = Facts(e.version, post.published_at, post.sentiment, tuple(post.tickers))
        self.acknowledged((e.data.id, t.lang) for e in events for t in e.data.translations)

    def refused(self, who: str, cursor: str, reason: str) -> None:
        """The service refused ``cursor``, which it had issued to ``who``."""
        self.refusals.append(Refusal(who, cursor, self.now(), reason))

    def refused_cursors(self) -> set[tuple[str, str]]:
        """The distinct (client, cursor) pairs refused: a cursor retried and refused again counts once."""
        return {(r.who, r.cursor) for r in self.refusals}

    def hook(self, endpoint_id: str, request: Request) -> None:
        """The receiver of ``endpoint_id`` got ``request``."""
        self.hooked[endpoint_id].append(Hooked(request, self.now()))

    def violation(self, text: str) -> None:
        self.violations.append(f"{self.now():.1f}s: {text}")
