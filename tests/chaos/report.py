"""The report of a mixed-fault run: operations, faults by kind, violations, unavailable windows
per endpoint (each matched to the faults it overlapped), publish-to-delivery latency, and a
timeline picture (faults as spans against latency and errors). Written to a results folder;
:func:`update_doc` puts its summary into docs/reliability.md."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from tests.chaos.history import RECENT_S, Fault, History

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
DOC_PICTURE = REPO / "docs" / "chaos-timeline.png"
BEGIN, END = "<!-- mixed-faults:begin -->", "<!-- mixed-faults:end -->"
#: The production shape's run has a section and a picture of its own, after the single shape's.
PRODUCTION_BEGIN, PRODUCTION_END = "<!-- mixed-faults-production:begin -->", "<!-- mixed-faults-production:end -->"
DOC_PRODUCTION_PICTURE = REPO / "docs" / "chaos-timeline-production.png"
#: A window or a latency is put down to a fault that ended at most this long before it.
AFTERMATH_S = 10.0


@dataclass(frozen=True, slots=True)
class Window:
    """A run of failed operations on one endpoint: from the first failure to the next success."""

    endpoint: str
    start: float
    end: float
    failures: int
    #: The fault it is put down to (:func:`around`), if any.
    faults: tuple[str, ...]

    @property
    def seconds(self) -> float:
        return self.end - self.start


def windows(history: History) -> list[Window]:
    found: list[Window] = []
    for endpoint in sorted({op.endpoint for op in history.ops}):
        opened: float | None = None
        failures = 0
        for op in sorted((o for o in history.ops if o.endpoint == endpoint), key=lambda o: o.start):
            if not op.ok:
                opened = op.start if opened is None else opened
                failures += 1
            elif opened is not None:
                found.append(Window(endpoint, opened, op.start, failures, around(history.faults, opened)))
                opened, failures = None, 0
        if opened is not None:
            found.append(Window(endpoint, opened, history.now(), failures, around(history.faults, opened)))
    return found


def around(faults: list[Fault], t: float) -> tuple[str, ...]:
    """The fault a window that opened at ``t`` is put down to: the last one started by then
    (within a second) and not over for more than ``AFTERMATH_S``; none when there is none."""
    started = [f for f in faults if f.start - 1.0 <= t <= f.end + AFTERMATH_S]
    return (max(started, key=lambda f: f.start).kind,) if started else ()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latencies(history: History) -> dict[tuple[int, str], tuple[float, float]]:
    """Per (post, locale): (publish time, seconds until the first stream client had it)."""
    first: dict[tuple[int, str], float] = {}
    for got in history.deliveries.values():
        for d in got:
            first[d.key] = min(first.get(d.key, d.at), d.at)
    return {k: (t, first[k] - t) for k, t in history.published.items() if k in first}


def webhook_latencies(history: History) -> dict[str, dict[tuple[int, str], tuple[float, float]]]:
    """Per webhook endpoint, per (post, locale): (publish time, seconds until the endpoint's
    receiver first answered 200 for it)."""
    found: dict[str, dict[tuple[int, str], tuple[float, float]]] = {}
    for endpoint_id in sorted(history.endpoints):
        first: dict[tuple[int, str], float] = {}
        for h in history.hooked.get(endpoint_id, []):
            if h.request.answer == "ok":
                first.setdefault(h.request.key, h.at)
        found[endpoint_id] = {
            k: (history.published[k], at - history.published[k]) for k, at in first.items() if k in history.published
        }
    return found


#: Faults that cannot hold a delivery back: the projector and the stream never call the API.
API_ONLY = ("kill api", "pause api")
#: A post published this long before a projector SIGKILL to this long after it is in its window.
KILL_WINDOW_S = (1.0, 15.0)


def in_kill_window(kill: Fault, published: float) -> bool:
    return kill.start - KILL_WINDOW_S[0] <= published <= kill.start + KILL_WINDOW_S[1]


def overlapping(faults: list[Fault], kill: Fault, published: float, delivered: float) -> list[str]:
    """The faults other than ``kill`` that could have held back a post between its publication
    and its delivery (any that was going on then, except those of the API alone)."""
    return [
        f.kind
        for f in faults
        if f is not kill and f.kind not in API_ONLY and f.start <= delivered and f.end >= published
    ]


def after_kills(history: History) -> dict[str, list[float]]:
    """Publish-to-delivery of the posts published from 1 s before to 15 s after a projector
    SIGKILL: ``any`` all of them, ``alone`` those no other fault overlapped from publication
    to delivery (a 2 to 6 s SIGSTOP of the projector or the stream in the window holds its
    posts back for as long as it lasts: that is the SIGSTOP's cost, not the SIGKILL's)."""
    kills = [f for f in history.faults if f.kind == "kill projector"]
    found: dict[str, list[float]] = {"any": [], "alone": []}
    for t, d in latencies(history).values():
        windows = [k for k in kills if in_kill_window(k, t)]
        if not windows:
            continue
        found["any"].append(d)
        if any(not overlapping(history.faults, k, t, t + d) for k in windows):
            found["alone"].append(d)
    return found


def kill_costs(history: History) -> list[dict]:
    """Per projector SIGKILL: when (s into the run), how long until the supervisor restarted
    it, until it was ready, until a post published after the kill was delivered, the slowest
    post of its window and the other faults in that window."""
    lat = latencies(history)
    found = []
    for kill in (f for f in history.faults if f.kind == "kill projector"):
        restarted = min((t for role, t in history.restarts if role == "projector" and t >= kill.start), default=None)
        later = [t + d for t, d in lat.values() if t >= kill.start]
        window = [d for t, d in lat.values() if in_kill_window(kill, t)]
        found.append(
            {
                "at": round(kill.start, 2),
                "restarted_after_s": None if restarted is None else round(restarted - kill.start, 2),
                "ready_after_s": round(kill.end - kill.start, 2),
                "delivering_after_s": round(min(later) - kill.start, 2) if later else None,
                "slowest_in_window_s": round(max(window), 2) if window else None,
                "other_faults_in_window": [
                    f.kind
                    for f in history.faults
                    if f is not kill
                    and f.start <= kill.start + KILL_WINDOW_S[1]
                    and f.end >= kill.start - KILL_WINDOW_S[0]
                ],
            }
        )
    return found


def stats(values: list[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": max(values) if values else None,
    }


def summary(history: History, violations: list[str], extra: dict) -> dict:
    lat = latencies(history)
    after_kill = after_kills(history)
    costs = kill_costs(history)
    by_fault: dict[str, list[float]] = {}
    for t, d in lat.values():  # each latency put down to a fault as a window is (:func:`around`)
        by_fault.setdefault((around(history.faults, t) or ("(no fault)",))[0], []).append(d)
    wins = windows(history)
    by_kind: dict[str, dict[str, float]] = {}
    for w in wins:
        for kind in w.faults or ("(no fault)",):
            slot = by_kind.setdefault(kind, {})
            slot[w.endpoint] = max(slot.get(w.endpoint, 0.0), round(w.seconds, 2))
    replica = [f for f in history.faults if f.kind.endswith("replica")]
    api_near_replica = [
        op.end - op.start
        for op in history.ops
        if op.endpoint.startswith("api") and any(f.start <= op.start <= f.end + AFTERMATH_S for f in replica)
    ]
    api_by_fault: dict[str, list[float]] = {}
    for op in history.ops:  # each request put down to a fault as a window is, from its start
        if op.endpoint.startswith("api"):
            api_by_fault.setdefault((around(history.faults, op.start) or ("(no fault)",))[0], []).append(
                op.end - op.start
            )
    ops = Counter(f"{op.endpoint} {'ok' if op.ok else 'failed'}" for op in history.ops)
    return {
        "seed": history.seed,
        "started_utc": datetime.fromtimestamp(history.wall_t0, timezone.utc).isoformat(timespec="milliseconds"),
        "duration_s": round(history.now(), 1),
        "operations": dict(sorted(ops.items())),
        "announcements": len(history.published),
        "aborted_posts": len(history.aborted),
        "deliveries": {name: len(got) for name, got in sorted(history.deliveries.items())},
        "walked": len(history.walked),
        "faults": dict(sorted(Counter(f.kind for f in history.faults).items())),
        "restarts": dict(sorted(Counter(name for name, _ in history.restarts).items())),
        "violations": violations,
        "latency_s": stats([d for _, d in lat.values()]),
        "latency_after_projector_kill_s": stats(after_kill["any"]),
        "latency_after_projector_kill_alone_s": stats(after_kill["alone"]),
        "projector_kills": costs,
        "projector_kill_s": {
            what: stats([c[key] for c in costs if c[key] is not None])
            for what, key in (
                ("restarted", "restarted_after_s"),
                ("ready", "ready_after_s"),
                ("delivering", "delivering_after_s"),
            )
        },
        "latency_s_by_fault": {kind: stats(values) for kind, values in sorted(by_fault.items())},
        "longest_window_s_by_fault": dict(sorted(by_kind.items())),
        "windows": [asdict(w) | {"seconds": round(w.seconds, 2)} for w in wins],
        "fault_spans": [asdict(f) for f in history.faults],
        "api_request_s_near_replica_faults": stats(api_near_replica),
        "api_request_s_by_fault": {kind: stats(values) for kind, values in sorted(api_by_fault.items())},
        "webhook_latency_s": {
            endpoint: stats([d for _, d in hooked.values()]) for endpoint, hooked in webhook_latencies(history).items()
        },
        "webhook_answers": {
            endpoint: dict(sorted(Counter(h.request.answer for h in history.hooked.get(endpoint, [])).items()))
            for endpoint in sorted(history.endpoints)
        },
        **extra,
    }


def picture(history: History, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(14, 7), sharex=True, height_ratios=[3, 2])
    kinds = sorted({f.kind for f in history.faults})
    colors = {k: plt.get_cmap("tab20")(i % 20) for i, k in enumerate(kinds)}
    for ax in (top, bottom):
        for f in history.faults:
            ax.axvspan(f.start, max(f.end, f.start + 0.3), color=colors[f.kind], alpha=0.35, lw=0)
    lat = latencies(history)
    top.scatter([t for t, _ in lat.values()], [d for _, d in lat.values()], s=6, color="black", label="stream")
    for endpoint_id, hooked in webhook_latencies(history).items():
        top.scatter(
            [t for t, _ in hooked.values()], [d for _, d in hooked.values()], s=4, label=f"webhook {endpoint_id}"
        )
    top.legend(loc="upper right", fontsize=8)
    top.set_ylabel("publish to delivery (s)")
    top.set_title(f"Mixed faults, seed {history.seed}: faults (spans), delivery latency, failed operations")
    endpoints = sorted({op.endpoint for op in history.ops})
    failed = [op for op in history.ops if not op.ok]
    bottom.scatter(
        [op.start for op in failed], [endpoints.index(op.endpoint) for op in failed], s=10, marker="x", color="red"
    )
    bottom.set_yticks(range(len(endpoints)), endpoints)
    bottom.set_xlabel("seconds since the start of the run")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k], alpha=0.5) for k in kinds]
    fig.legend(handles, kinds, loc="lower center", ncol=min(5, max(1, len(kinds))), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def latency_table(history: History) -> str:
    """One line per (post, locale): published and delivered (s into the run), the latency and
    the fault it is put down to (:func:`around`): what a slow delivery can be traced with."""
    lines = ["post,locale,published_s,delivered_s,latency_s,fault"]
    for (post, locale), (t, d) in sorted(latencies(history).items(), key=lambda kv: kv[1][0]):
        fault = (around(history.faults, t) or ("",))[0]
        lines.append(f"{post},{locale},{t:.3f},{t + d:.3f},{d:.3f},{fault}")
    return "\n".join(lines) + "\n"


def operation_table(history: History) -> str:
    """One line per operation of the workload, with the fault it is put down to."""
    lines = ["endpoint,start_s,end_s,ok,detail,fault"]
    for op in sorted(history.ops, key=lambda o: o.start):
        fault = (around(history.faults, op.start) or ("",))[0]
        lines.append(f"{op.endpoint},{op.start:.3f},{op.end:.3f},{int(op.ok)},{op.detail},{fault}")
    return "\n".join(lines) + "\n"


def write(history: History, violations: list[str], results: Path, extra: dict) -> dict:
    results.mkdir(parents=True, exist_ok=True)
    report = summary(history, violations, extra)
    (results / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (results / "report.md").write_text(markdown(report, "timeline.png"))
    (results / "latencies.csv").write_text(latency_table(history))
    (results / "operations.csv").write_text(operation_table(history))
    (results / "webhooks.jsonl").write_text(webhook_requests(history))
    (results / "deliveries.csv").write_text(delivery_table(history))
    picture(history, results / "timeline.png")
    return report


def delivery_table(history: History) -> str:
    """Every post.created each stream client processed, in order, with the connection it came on."""
    rows = ["client,post,lang,partition,offset,at,connection"]
    rows += [
        f"{name},{d.key[0]},{d.key[1]},{d.partition},{d.offset},{d.at:.3f},{d.connection}"
        for name, got in sorted(history.deliveries.items())
        for d in got
    ]
    return "\n".join(rows) + "\n"


def webhook_requests(history: History) -> str:
    """Every request each webhook receiver got, one JSON object a line, in arrival order: what a
    reader needs to follow one ``webhook-id`` through its attempts."""
    return "".join(
        json.dumps(
            {"endpoint": endpoint_id, "at": round(h.at, 3), "webhook_id": h.request.webhook_id}
            | {"answer": h.request.answer, "message": h.request.message}
        )
        + "\n"
        for endpoint_id, got in sorted(history.hooked.items())
        for h in got
    )


def _fmt(stat: dict) -> str:
    if not stat["n"]:
        return "none"
    return f"p50 {stat['p50']:.2f} s, p99 {stat['p99']:.2f} s, max {stat['max']:.2f} s (n={stat['n']})"


def _by_fault(by_fault: dict | None, title: str, counted: str) -> list[str]:
    if not by_fault:
        return []
    lines = ["", title, "", f"| fault | {counted} | p50 | p99 | max |", "|---|---|---|---|---|"]
    for kind, st in by_fault.items():
        lines.append(f"| {kind} | {st['n']} | {st['p50']:.2f} s | {st['p99']:.2f} s | {st['max']:.2f} s |")
    return lines


def _tally(counts: dict | None) -> list[str]:
    if counts is None:
        return []
    return [
        f"- Lost (post, locale) pairs (acknowledged, not served or never delivered): {counts['lost']}; pushed or "
        f"walked more than once: {counts['doubled']}; cursors the service issued, then refused: {counts['refused']}"
    ]


def _webhooks(report: dict) -> list[str]:
    """One line per webhook endpoint: its requests and answers, its counts, publish-to-receipt."""
    lines = []
    answers = report.get("webhook_answers", {})
    latency = report.get("webhook_latency_s", {})
    for endpoint_id, got in (report.get("webhooks") or {}).items():
        counts = "; ".join(f"{what}: {n}" for what, n in got.items() if what not in ("requests", "acknowledged"))
        said = ", ".join(f"{a} {n}" for a, n in answers.get(endpoint_id, {}).items())
        lines.append(
            f"- Webhook endpoint {endpoint_id}: {got['requests']} requests ({said or 'none'}), "
            f"{got['acknowledged']} announcements acknowledged; {counts}; publish-to-receipt "
            + (_fmt(latency[endpoint_id]) if endpoint_id in latency else "?")
        )
    return lines


def _failovers(failovers: list[dict] | None) -> list[str]:
    """One line: how long each step of the failovers took from the SIGKILL of the primary."""
    if not failovers:
        return []
    steps = {"promoted": "standby promoted", "api": "API answering", "ready": "every process ready"}
    steps["rebuilt"] = "old primary rebuilt as the standby"
    parts = [f"{label} {_fmt(stats([f[key] - f['killed'] for f in failovers]))}" for key, label in steps.items()]
    unreadable = f"{sum(f['unreadable'] for f in failovers)} of {sum(f['pushed'] for f in failovers)}"
    if any(f.get("missing") for f in failovers):
        unreadable += f" ({sum(f.get('missing', 0) for f in failovers)} not on the standby when it was promoted)"
    return [
        f"- Failovers: {len(failovers)}; from the SIGKILL of the primary: "
        + "; ".join(parts)
        + f"; pairs pushed in the {RECENT_S:.0f} s before it that GET did not serve once the API answered: "
        + unreadable
    ]


def _limits(limits: dict | None) -> list[str]:
    """One line: the limits checked across processes (the production shape)."""
    if not limits:
        return []
    statuses = ", ".join(f"{k if k != '0' else 'no answer'} ×{v}" for k, v in limits["rated statuses"].items())
    refusals = ", ".join(f"{k} ×{v}" for k, v in limits["capped refusals"].items()) or "none"
    return [
        f"- Limits across processes: the capped workspace (5 stream connections, 6 clients trying) had "
        f"{limits['capped connections']} connections, at most {limits['capped most open at once (over 1 s)']} open at "
        f"once (for longer than 1 s), upgrades refused {refusals}; the rated workspace (60 a minute, asked 3 a "
        f"second) got {statuses} over {limits['rated requests']} requests, at most "
        f"{limits['rated most served in a minute']} served in one UTC minute ({limits['rated minutes']} minutes)"
    ]


def markdown(report: dict, picture_link: str) -> str:
    ops = report["operations"]
    lines = [
        f"- Seed {report['seed']}, {report['duration_s']:.0f} s in all ({report.get('fault_minutes', '?')} min of faults); "
        + "; ".join(f"{k}: {v}" for k, v in report.get("conditions", {}).items()),
        f"- Operations: {', '.join(f'{k} {v}' for k, v in ops.items())}",
        f"- Announcements expected: {report['announcements']} (posts of aborted transactions: "
        f"{report['aborted_posts']}); received per stream client: "
        + ", ".join(f"{k} {v}" for k, v in report["deliveries"].items())
        + f"; walked in /changes: {report['walked']}",
        f"- Faults: {', '.join(f'{k} ×{v}' for k, v in report['faults'].items())}; processes restarted by the "
        f"supervisor: {', '.join(f'{k} ×{v}' for k, v in report['restarts'].items()) or 'none'}",
        f"- Violations: {len(report['violations'])}"
        + (f" (first: {report['violations'][0]})" if report["violations"] else ""),
        *_tally(report.get("tally")),
        *_limits(report.get("limits")),
        *_failovers(report.get("failovers")),
        *_webhooks(report),
        f"- Publish-to-delivery (first stream client): {_fmt(report['latency_s'])}",
        f"- Publish-to-delivery of posts published from 1 s before to 15 s after a projector SIGKILL: "
        f"{_fmt(report['latency_after_projector_kill_s'])}; of those no other fault overlapped from publication to "
        f"delivery: {_fmt(report['latency_after_projector_kill_alone_s'])}",
        "- After a projector SIGKILL: "
        + "; ".join(f"{what} {_fmt(st)}" for what, st in report["projector_kill_s"].items())
        + " (restarted by the supervisor; ready; a post published after the kill delivered)",
        f"- API requests (any endpoint) started during a replica fault or {AFTERMATH_S:.0f} s after: "
        f"{_fmt(report['api_request_s_near_replica_faults'])}",
        f"- ERROR lines in the service logs: {report.get('error_lines', '?')}"
        + "".join(f"\n  - {n} × `{kind}`" for kind, n in list(report.get("error_kinds", {}).items())[:12]),
        "",
        "Longest unavailable window per endpoint (from the first failed operation to the next served one), by the fault "
        f"it is put down to (the last one started before it, ended at most {AFTERMATH_S:.0f} s before):",
        "",
        "| fault | " + " | ".join(endpoints := sorted({w["endpoint"] for w in report["windows"]})) + " |",
        "|---|" + "---|" * len(endpoints),
    ]
    for kind, slot in report["longest_window_s_by_fault"].items():
        lines.append(f"| {kind} | " + " | ".join(f"{slot[e]:.2f} s" if e in slot else "-" for e in endpoints) + " |")
    lines += _by_fault(
        report.get("latency_s_by_fault"),
        "Publish-to-delivery by the fault each post is put down to (the same rule, from its publication):",
        "posts",
    )
    lines += _by_fault(
        report.get("api_request_s_by_fault"),
        "API request durations (any endpoint, failed ones included) by the fault each is put down to "
        "(the same rule, from its start):",
        "requests",
    )
    lines += ["", f"![Timeline: faults against publish-to-delivery latency and failed operations]({picture_link})", ""]
    return "\n".join(lines)


INTRO = """## Mixed faults

Generated by `python -m tests.chaos.run --doc` (tests/chaos; [testing.md](testing.md) says how to
run it); do not edit the figures by hand. One run of its own Apache Kafka, two PostgreSQL
servers, a primary and its synchronous streaming standby (the API and the stream read from
the standby; the services follow whichever server is writable), and a projector (static
membership), an API, a stream process and two webhook dispatchers (retry schedule compressed
500 times), each restarted by a supervisor when it dies. For
the minutes given, a seeded nemesis injects one fault after another (SIGKILL or a 2 to 6 s
SIGSTOP of each service process, SIGKILL of a dispatcher, a webhook receiver down for 5 to
8 s, the standby killed or frozen, the primary restarted, crashed
(SIGKILL, then crash recovery) or failed over (SIGKILL, the standby promoted, the old primary
rebuilt as its standby), the broker restarted, the services' network to the primary, the
standby or Kafka cut for 2 to 6 s or slowed by 50 to 400 ms a chunk for 3 to 8 s) while a librdkafka writer publishes about 6 posts a second (a quarter partial,
completed 5 to 20 s later; a fifth backdated), a transactional aiokafka writer commits two
posts every ~3 s and aborts one transaction in five, three stream clients resume with cursors
after dropping themselves every 2 to 20 s, a walker follows `/changes`, two readers demand
`X-Min-Log-Position`, and two webhook endpoints (one for every locale, one for de-DE) are
served by receivers that fail at random (500s, resets, 429s, answers past the 1 s attempt
timeout). A request counts as failed on an error, a 5xx or no answer within 3 s.
At the end every token's `post_count` and the sentiment pulse must equal what the posts add up to,
and the pairs lost, the pairs pushed or walked twice and the issued cursors refused are counted;
so are, per webhook endpoint, the announcements its filter admits that its receiver never
acknowledged, the steps back in its requests' positions, the announcements sent again under
another `webhook-id`, the `webhook-id`s sent again with other data, the requests whose
signature failed and those outside its filter.
"""


PRODUCTION_INTRO = """## Mixed faults on the production shape

Generated by `python -m tests.chaos.run --shape production --doc`; do not edit the figures by
hand. The same run as [above](#mixed-faults), on the production shape: three Apache Kafka
nodes (a KRaft quorum; topics at replication factor 3 with `min.insync.replicas=2`), two api
processes sharing one port and two stream processes sharing another (`SO_REUSEPORT`: the
kernel spreads the partners' connections), beside the projector, the two dispatchers and the
two PostgreSQL servers. The nemesis draws from the same faults, a kill or freeze of the api or
the stream hitting one of its two processes, and instead of the lone broker's restart, cut and
slowdown: the leader of a posts partition SIGKILLed, the active controller SIGKILLed (each
down 5 to 10 s, then started on its log), a node frozen 2 to 8 s (past 4 s its broker session
has expired: it wakes believing it still leads), the services' network to one node cut for
2 to 6 s or slowed; each of those ends once every partition is fully replicated again. Beside
the workload above, six stream clients of a workspace limited to 5 connections try all along
through the shared port, and a client asks three times a second for a workspace limited to 60
requests a minute: more than 5 open at once for longer than a second (the order one event
loop sees two sockets in), or more than 60 served in a UTC minute, is a violation.
"""


def kept(doc_text: str) -> str:
    """The mixed-fault part of a reliability document (from its section on), which a rewrite of
    the rest by ``python -m tests.reliability.run`` keeps; '' when there is none."""
    return doc_text[doc_text.index(BEGIN) :] if BEGIN in doc_text else ""


def update_doc(report: dict, results: Path) -> None:
    """Replace the mixed-fault section of docs/reliability.md of the run's shape with this run's,
    and its picture (what follows the section, notes by hand, stays)."""
    production = report.get("shape") == "production"
    begin, end = (PRODUCTION_BEGIN, PRODUCTION_END) if production else (BEGIN, END)
    picture = DOC_PRODUCTION_PICTURE if production else DOC_PICTURE
    shutil.copyfile(results / "timeline.png", picture)
    section = "\n".join([begin, PRODUCTION_INTRO if production else INTRO, markdown(report, picture.name), end])
    text = DOC.read_text()
    if begin in text:
        head, _, rest = text.partition(begin)
        text = head + section + rest.partition(end)[2]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)
