"""The projector's row dataclasses against the migrated tables: every field is a column of its
table with the declared type, so a column added to one and not the other fails here."""

from __future__ import annotations

import pytest

from tickerwire.services.projector import rows

ROWS = [
    rows.PostRow,
    rows.TranslationRow,
    rows.LocaleRow,
    rows.TokenRow,
    rows.WorkspaceRow,
    rows.ApiKeyRow,
    rows.EmbedRow,
    rows.HeartbeatRow,
]
#: Fields that are statement inputs, not stored columns, and where the stored type differs from
#: the transported one (JSON text into jsonb / text[]).
NOT_STORED = {("post_translations", c) for c in rows.TEXT_INPUTS}
TRANSPORTED_AS = {
    ("tokens", "exchange_listings"): ("text", "text[]"),
    ("tokens", "categories"): ("text", "text[]"),
    ("tokens", "primary_ecosystem"): ("text", "jsonb"),
}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.__name__)
async def test_every_field_is_a_column_of_its_table_with_its_type(conn, row):
    stored = {
        r["column_name"]: r["type"]
        for r in await conn.fetch(
            "SELECT a.attname AS column_name, format_type(a.atttypid, a.atttypmod) AS type "
            "FROM pg_attribute a WHERE a.attrelid = ('rm.' || $1)::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            row.TABLE,
        )
    }
    aliases = {"timestamp with time zone": "timestamptz"}  # format_type spells it out
    for column, declared in row.sql_types().items():
        if (row.TABLE, column) in NOT_STORED:
            assert column not in stored
            continue
        transported, expected = TRANSPORTED_AS.get((row.TABLE, column), (declared, declared))
        assert declared == transported, column
        assert aliases.get(stored[column], stored[column]) == expected, column


def test_placeholders_and_arrays_follow_the_field_order():
    row = rows.HeartbeatRow("bdg_1", "ws_1", None)  # type: ignore[arg-type]
    assert rows.HeartbeatRow.params() == {"embed_id": "$1", "workspace_id": "$2", "landed_at": "$3"}
    assert rows.HeartbeatRow.arrays([row, row]) == [["bdg_1", "bdg_1"], ["ws_1", "ws_1"], [None, None]]
    assert row.values() == ("bdg_1", "ws_1", None)
    assert rows.HeartbeatRow.unnest() == (
        "unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(embed_id, workspace_id, landed_at)"
    )
