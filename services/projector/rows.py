"""The rows the projector writes, by column name.

Each written table has a frozen dataclass whose fields are its columns (in the order of the
statement's parameters); the column list, the ``$n`` placeholders, the ``unnest`` arrays and
the PostgreSQL types are derived from the fields once, so a new column is one new field (plus
its line in the migration), never a renumbering of ``$1..$n``. The statements built from them
stay with the projector (``services/projector/sql.py``), their only writer.
"""

from __future__ import annotations

import operator
import types
import typing
from dataclasses import dataclass, fields
from datetime import date, datetime
from typing import Annotated, Any, Callable, ClassVar, Iterable, Sequence, TypeVar, Union

from ..readmodel import mapping

#: Annotated marker of a ``bigint`` column (a plain ``int`` field is ``integer``).
BIGINT = "bigint"

_SQL_TYPES: dict[Any, str] = {
    str: "text",
    int: "integer",
    bool: "boolean",
    datetime: "timestamptz",
    date: "date",
    bytes: "bytea",
    list[str]: "text[]",
    tuple[str, ...]: "text[]",
}


def _sql_type(hint: Any) -> str:
    if typing.get_origin(hint) is Annotated:
        return hint.__metadata__[0]
    if typing.get_origin(hint) in (Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _sql_type(inner)
    return _SQL_TYPES[hint]


R = TypeVar("R", bound="Row")


class Row:
    """Base of the row dataclasses: derived column lists, placeholders and values."""

    __slots__ = ()
    #: The table written (unqualified: the search_path points at the read-model schema).
    TABLE: ClassVar[str]
    #: Column types that the fields' annotations do not say (inherited fields).
    TYPES: ClassVar[dict[str, str]] = {}

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        return _columns(cls)

    @classmethod
    def params(cls) -> dict[str, str]:
        """Column name -> its ``$n`` placeholder, in field order."""
        return {name: f"${n}" for n, name in enumerate(cls.columns(), start=1)}

    @classmethod
    def sql_types(cls) -> dict[str, str]:
        return _types(cls)

    @classmethod
    def unnest(cls, alias: str = "u") -> str:
        """``unnest($1::text[], ...) AS u(col, ...)``: one array parameter per column."""
        kinds = cls.sql_types()
        arrays = ", ".join(f"{p}::{kinds[c]}[]" for c, p in cls.params().items())
        return f"unnest({arrays}) AS {alias}({', '.join(cls.columns())})"

    @classmethod
    def arrays(cls: type[R], rows: Sequence[R]) -> list[list[object]]:
        """The parameters of :meth:`unnest`: one list per column, one value per row."""
        return [[getattr(r, c) for r in rows] for c in cls.columns()]

    @classmethod
    def unnest_batch(cls, alias: str = "u") -> str:
        """:meth:`unnest` for the values of :meth:`batch_arrays`, whose array columns (a list per
        row, of different lengths, which a 2-D array cannot hold) and ``jsonb`` ones travel as
        text: select a column as :meth:`batch_value` gives it."""
        kinds = cls.sql_types()
        arrays = ", ".join(f"{p}::{_carrier(kinds[c])}[]" for c, p in cls.params().items())
        return f"unnest({arrays}) AS {alias}({', '.join(cls.columns())})"

    @classmethod
    def batch_value(cls, column: str, alias: str = "u") -> str:
        """The expression of ``column`` over :meth:`unnest_batch`, in its own type."""
        kind = cls.sql_types()[column]
        return f"{alias}.{column}" if _carrier(kind) == kind else f"{alias}.{column}::{kind}"

    @classmethod
    def batch_arrays(cls, records: Sequence[Sequence[Any]]) -> list[list[Any]]:
        """The parameters of :meth:`unnest_batch`: one list per column of ``records`` (each a
        row's :meth:`values`), an array value as PostgreSQL's text form of it."""
        if not records:
            return [[] for _ in cls.columns()]
        columns = [list(c) for c in zip(*records, strict=True)]
        for i in _text_arrays(cls):
            columns[i] = [None if v is None else text_array(v) for v in columns[i]]
        return columns

    def values(self) -> tuple:
        """The row's values in column order (the parameters of a one-row statement, or a COPY record)."""
        return _getter(type(self))(self)


_COLUMNS: dict[type, tuple[str, ...]] = {}
_GETTERS: dict[type, Callable[[Any], tuple]] = {}


def _columns(cls: type) -> tuple[str, ...]:
    if (cols := _COLUMNS.get(cls)) is None:
        cols = _COLUMNS[cls] = tuple(f.name for f in fields(cls))
    return cols


def _getter(cls: type) -> Callable[[Any], tuple]:
    """The values of every column of a row of ``cls``, as one tuple (the hot path: one call)."""
    if (get := _GETTERS.get(cls)) is None:
        cols = _columns(cls)
        getter = operator.attrgetter(*cols)
        get = _GETTERS[cls] = getter if len(cols) > 1 else (lambda row: (getter(row),))
    return get


def _carrier(kind: str) -> str:
    """The type a column of ``kind`` travels as in :meth:`Row.unnest_batch`."""
    return "text" if kind.endswith("[]") or kind == "jsonb" else kind


_TEXT_ARRAYS: dict[type, tuple[int, ...]] = {}


def _text_arrays(cls: type) -> tuple[int, ...]:
    """The positions of the array columns of ``cls`` (the hot path: computed once)."""
    if (found := _TEXT_ARRAYS.get(cls)) is None:
        found = _TEXT_ARRAYS[cls] = tuple(i for i, kind in enumerate(_types(cls).values()) if kind.endswith("[]"))
    return found


def text_array(values: Iterable[str]) -> str:
    """PostgreSQL's text form of a ``text[]``: every element quoted (backslash and quote escaped),
    so that any text reads back as it was."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def _types(cls: type) -> dict[str, str]:
    hints = typing.get_type_hints(cls, include_extras=True)
    overrides: dict[str, str] = getattr(cls, "TYPES", {})
    return {c: overrides.get(c) or _sql_type(hints[c]) for c in _columns(cls)}


def upsert_from_arrays(
    row: type[Row], key: str, guard: str, *, select: dict[str, str] | None = None, alias: str = "t"
) -> str:
    """A set-based upsert: every row of the arrays inserted, or updating the stored row (every
    column but ``key``) where ``guard`` holds (``{alias}`` the stored row, ``EXCLUDED`` the new
    one); returns the keys written. ``select`` overrides a column's value expression over ``u``."""
    cols = row.columns()
    values = ", ".join((select or {}).get(c, f"u.{c}") for c in cols)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c != key)
    return (
        f"INSERT INTO {row.TABLE} AS {alias} ({', '.join(cols)})\n"
        f"SELECT {values}\nFROM {row.unnest()}\n"
        f"ON CONFLICT ({key}) DO UPDATE SET {updates}\n"
        f"WHERE {guard}\nRETURNING {key}"
    )


# --------------------------------------------------------------------------- posts


@dataclass(frozen=True, slots=True)
class PostRow(Row):
    TABLE: ClassVar[str] = "posts"
    id: Annotated[int, BIGINT]
    version: Annotated[int, BIGINT]
    status: str
    published_at: datetime | None
    sentiment: str
    importance: int
    tickers: list[str]
    #: The post event's data as JSON (jsonb).
    snapshot: Annotated[str, "jsonb"]


@dataclass(frozen=True, slots=True)
class TranslationRow(Row, mapping.MappedTranslation):
    """One written row of post_translations: the pure mapping's row of one locale
    (:class:`..readmodel.mapping.MappedTranslation`), where it was announced and what its
    tsvector is computed from. ``ts_config``, ``title``, ``lede`` and ``body`` are not stored:
    the tsvector is computed from them (:data:`TEXT_INPUTS`)."""

    TABLE: ClassVar[str] = "post_translations"
    TYPES: ClassVar[dict[str, str]] = {"post_id": BIGINT}
    #: The record that first made the translation visible (None: not announced by this write).
    announced_partition: int | None
    announced_offset: Annotated[int | None, BIGINT]
    #: What the tsvector is computed from (equal hashes, equal vectors).
    text_hash: bytes

    @classmethod
    def written(
        cls,
        row: mapping.MappedTranslation,
        *,
        visible: bool,
        announced_partition: int | None,
        announced_offset: int | None,
        text_hash: bytes,
    ) -> "TranslationRow":
        values: list[Any] = list(_getter(type(row))(row))
        values[_VISIBLE] = visible
        values += (announced_partition, announced_offset, text_hash)
        return cls(*values)


_VISIBLE = _columns(mapping.MappedTranslation).index("visible")
#: The columns of :class:`TranslationRow` the tsvector is computed from, not stored.
TEXT_INPUTS = ("ts_config", "title", "lede", "body")


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True, slots=True)
class LocaleRow(Row):
    TABLE: ClassVar[str] = "locales"
    code: str
    version: Annotated[int, BIGINT]
    name: str
    native_name: str
    country_code: str
    direction: str
    active: bool
    web_channel: bool
    is_default: bool
    position: int


@dataclass(frozen=True, slots=True)
class TokenRow(Row):
    """A token; the list and object columns travel as JSON text (see the projector's upsert)."""

    TABLE: ClassVar[str] = "tokens"
    ticker: str
    version: Annotated[int, BIGINT]
    name: str
    logo_url: str | None
    market_cap_rank: int | None
    exchange_listings: str
    categories: str
    genesis_date: date | None
    primary_ecosystem: str | None
    homepage_url: str | None
    description: str | None


# --------------------------------------------------------------------------- access


@dataclass(frozen=True, slots=True)
class WorkspaceRow(Row):
    TABLE: ClassVar[str] = "workspaces"
    id: str
    version: Annotated[int, BIGINT]
    name: str
    status: str
    rate_limit_per_minute: int | None
    daily_quota: int | None
    stream_connection_limit: int | None


@dataclass(frozen=True, slots=True)
class ApiKeyRow(Row):
    TABLE: ClassVar[str] = "api_keys"
    id: str
    version: Annotated[int, BIGINT]
    workspace_id: str
    key_hash: str
    display_prefix: str
    issued_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class EmbedRow(Row):
    TABLE: ClassVar[str] = "embeds"
    id: str
    version: Annotated[int, BIGINT]
    workspace_id: str
    kind: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class HeartbeatRow(Row):
    TABLE: ClassVar[str] = "heartbeats"
    embed_id: str
    workspace_id: str
    landed_at: datetime


@dataclass(frozen=True, slots=True)
class WebhookEndpointRow(Row):
    TABLE: ClassVar[str] = "webhook_endpoints"
    id: str
    version: Annotated[int, BIGINT]
    workspace_id: str
    url: str
    #: The filters as JSON arrays (null: no filter); stored as text[] (``FILTER_ARRAYS``).
    locales: Annotated[str, "jsonb"] | None
    tickers: Annotated[str, "jsonb"] | None
    categories: Annotated[str, "jsonb"] | None
    status: str
    secret_generation: int
    rotated_at: datetime | None
    start_cursor: str | None
    replay_from: str | None
    replay_seq: int
    created_at: datetime
    description: str


#: How the upsert of :class:`WebhookEndpointRow` turns each JSON filter into a text[] column.
FILTER_ARRAYS = {
    c: f"CASE WHEN u.{c} IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(u.{c})) END"
    for c in ("locales", "tickers", "categories")
}
