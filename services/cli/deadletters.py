"""``tickerwire dead-letters list | show | retry``: the records the projector set aside.

A retry publishes the stored record again, as it was (key and value), to the topic it came
from, after checking it the way the projector reads a record today (a widened schema, a fixed
producer, a schema registered since: with a registry configured, a framed value's schema id is
looked up in it as the live projector does, :mod:`..projector.registry`): the
projector applies it as any record, so a retry is idempotent (an entity's newest version
wins, an older one changes nothing) and a post is announced at most once (announcements are
tied to the record that first made a translation visible). The letter is removed once the
broker has the record; a record the projector refuses again becomes a new letter.
"""

from __future__ import annotations

import argparse
import base64
import sys
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from tickerwire.schemas.models import registry_schema_id

from ..common.kafka import ensure_declared_before, started_producer
from ..projector.apply import ConsumedRecord, decode_records
from ..projector.registry import SchemaRegistry, registry_of
from ..projector.settings import ProjectorConfig
from . import argtypes
from .admin import AdminError, BadArgument
from .running import cli_config, read_conn, run_admin

_COLUMNS = 'id, topic, partition, "offset", key, value, reason_kind, reason, received_at'
#: A reason longer than this is cut in ``list`` (``show`` prints it whole).
LIST_REASON_CHARS = 120


@dataclass(frozen=True, slots=True)
class Letter:
    id: int
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason_kind: str
    reason: str
    received_at: datetime

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def line(self) -> str:
        reason = self.reason if len(self.reason) <= LIST_REASON_CHARS else self.reason[: LIST_REASON_CHARS - 1] + "…"
        return "\t".join(
            (str(self.id), self.where, self.reason_kind, self.received_at.isoformat(timespec="seconds"), reason)
        )

    def details(self) -> str:
        return "\n".join(
            (
                f"id:          {self.id}",
                f"record:      {self.where}",
                f"received at: {self.received_at.isoformat()}",
                f"reason kind: {self.reason_kind}",
                f"reason:      {self.reason}",
                f"key:         {_shown(self.key)}",
                f"value:       {_shown(self.value)}",
            )
        )

    async def refusal(self, registry: SchemaRegistry | None) -> str | None:
        """Why a retry would be refused today, by the projector's own reading (``registry``, the
        configured one: its lookup of a framed value's schema id, then the decoding); None if it
        would be applied."""
        if self.value is None:
            return (
                (
                    "its value was never read (the consumer could not decode the batch): publish it again "
                    "from its producer once the cause is fixed"
                )
                if self.reason_kind in ("codec", "corrupt_batch")
                else ("it has no value (tombstone)")
            )
        records = [ConsumedRecord(self.offset, self.key, self.value)]
        if registry is not None:
            records = await registry.vet(records)
        _, dead = decode_records(records, self.topic)
        return dead[0].reason if dead else None


def _shown(raw: bytes | None) -> str:
    """Text as text; bytes that are not UTF-8 as base64 (a schema-registry frame says so)."""
    if raw is None:
        return "(none)"
    try:
        return raw.decode()
    except UnicodeDecodeError:
        schema_id = registry_schema_id(raw)
        framed = "" if schema_id is None else f" (framed by a schema-registry serializer, schema id {schema_id})"
        return f"base64:{base64.b64encode(raw).decode()}{framed}"


def _letter(row: asyncpg.Record) -> Letter:
    return Letter(
        row["id"],
        row["topic"],
        row["partition"],
        row["offset"],
        row["key"],
        row["value"],
        row["reason_kind"],
        row["reason"],
        row["received_at"],
    )


async def list_letters(conn: asyncpg.Connection, *, kind: str | None, topic: str | None, limit: int) -> list[Letter]:
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM dead_letters WHERE ($1::text IS NULL OR reason_kind = $1) "
        "AND ($2::text IS NULL OR topic = $2) ORDER BY id LIMIT $3",
        kind,
        topic,
        limit,
    )
    return [_letter(r) for r in rows]


async def letters(conn: asyncpg.Connection, ids: list[int]) -> list[Letter]:
    """The letters with these ids, in the order asked; an id with none is a bad argument."""
    found = {
        r["id"]: _letter(r)
        for r in await conn.fetch(f"SELECT {_COLUMNS} FROM dead_letters WHERE id = ANY($1::bigint[])", ids)
    }
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise BadArgument(f"no dead letter with id {', '.join(missing)} (see tickerwire dead-letters list)")
    return [found[i] for i in ids]


async def refusals(config: ProjectorConfig, chosen: list[Letter]) -> list[str]:
    """Why each chosen letter that would be refused again today would be, read as the projector
    reads it (with the registry of ``config``, if one is configured: a registry that does not
    answer fails the command, it is not a refusal)."""
    registry = registry_of(config.projector_schema_registry_url, config.projector_schema_registry_timeout_s)
    try:
        return [
            f"dead letter {letter.id} ({letter.where}): {why}"
            for letter in chosen
            if (why := await letter.refusal(registry)) is not None
        ]
    finally:
        if registry is not None:
            await registry.close()


async def retry(config: ProjectorConfig, conn: asyncpg.Connection, chosen: list[Letter]) -> list[str]:
    """Publish again every chosen letter that the projector would apply today, and remove it;
    refuse all of them, publishing nothing, when one would be refused again."""
    refused = await refusals(config, chosen)
    if refused:
        raise AdminError("; ".join(refused) + "; nothing was published")
    if not chosen:
        return []
    await ensure_declared_before(config, "retrying dead letters")
    done = []
    async with started_producer(config, client_id="tickerwire-dead-letters") as producer:
        for letter in chosen:
            meta = await (await producer.send(letter.topic, value=letter.value, key=letter.key))
            await conn.execute("DELETE FROM dead_letters WHERE id = $1", letter.id)
            done.append(
                f"dead letter {letter.id} ({letter.where}) published again at {meta.topic}[{meta.partition}]@{meta.offset}"
            )
    return done


# --------------------------------------------------------------------------- the command


def cmd_dead_letters(args: argparse.Namespace) -> int:
    if args.action == "retry" and bool(args.ids) == bool(args.all):
        print(
            "tickerwire dead-letters retry: give dead letter ids or --all, not both nor neither "
            "(see tickerwire dead-letters retry --help)",
            file=sys.stderr,
        )
        return 2

    async def go() -> int:
        config = cli_config()
        async with read_conn(config, read_only=args.action != "retry") as conn:
            if args.action == "list":
                found = await list_letters(conn, kind=args.kind, topic=args.topic, limit=args.limit)
                for letter in found:
                    print(letter.line())
                print(
                    f"{len(found)} dead letter(s)" + (f" (the first {args.limit})" if len(found) == args.limit else ""),
                    file=sys.stderr,
                )
                return 0
            if args.action == "show":
                print("\n\n".join(letter.details() for letter in await letters(conn, args.ids)))
                return 0
            if args.all:
                chosen = await list_letters(conn, kind=args.kind, topic=args.topic, limit=args.limit)
            else:
                chosen = await letters(conn, args.ids)
            for line in await retry(config, conn, chosen):
                print(line)
            print(f"{len(chosen)} dead letter(s) published again", file=sys.stderr)
            return 0

    return run_admin("dead-letters", go())


def register(sub) -> None:
    dl = sub.add_parser("dead-letters", help="list, show or retry the records the projector set aside")
    dl_sub = dl.add_subparsers(dest="action", required=True, metavar="ACTION")
    letter_id = argtypes.bounded_int(1, 2**63 - 1)
    dl_list = dl_sub.add_parser(
        "list", help="one line each: id, topic[partition]@offset, reason kind, received at, reason"
    )
    dl_show = dl_sub.add_parser("show", help="everything stored of the given dead letters: reason, key, value")
    dl_show.add_argument("ids", nargs="+", type=letter_id, metavar="ID", help="dead letter id, as `list` prints it")
    dl_retry = dl_sub.add_parser(
        "retry",
        help="publish the given dead letters again, after a fix, and remove them "
        "(all or none: refused when today's contract would refuse one)",
    )
    dl_retry.add_argument("ids", nargs="*", type=letter_id, metavar="ID", help="dead letter id, as `list` prints it")
    dl_retry.add_argument("--all", action="store_true", help="every dead letter (that --kind and --topic select)")
    for cmd in (dl_list, dl_retry):
        cmd.add_argument(
            "--kind",
            type=argtypes.dead_letter_kind,
            help="only this reason kind (codec, corrupt_batch, undecodable, unknown_schema_id, "
            "unknown_type, unknown_schema_version, schema, wrong_topic, rejected)",
        )
        cmd.add_argument("--topic", help="only this topic")
        cmd.add_argument(
            "--limit", type=argtypes.bounded_int(1, 100_000), default=1000, help="at most this many (default 1000)"
        )
    dl.set_defaults(func=cmd_dead_letters)
