"""Which supported locale a request's ``lang`` names (docs/api.md#lang-fallback): exact, then case-insensitive as
BCP 47 says, else the default."""

from __future__ import annotations

import logging

import orjson

from tickerwire.services.api.catalog import languages_of


def row(code: str, is_default: bool = False) -> dict:
    return {
        "code": code,
        "name": code,
        "native_name": code,
        "country_code": code[-2:],
        "direction": "ltr",
        "is_default": is_default,
    }


def test_a_tag_names_its_locale_in_any_case_and_an_unknown_one_falls_back():
    languages = languages_of([row("en-US", is_default=True), row("de-DE"), row("pt-br")])
    assert languages.resolve("de-DE") == "de-DE"
    assert [languages.resolve(t) for t in ("de-de", "DE-DE", "De-dE")] == ["de-DE"] * 3
    # A code published in another case than BCP 47's is found by either casing.
    assert [languages.resolve(t) for t in ("pt-br", "pt-BR", "PT-BR")] == ["pt-br"] * 3
    assert [languages.resolve(t) for t in (None, "", "xx-XX", "pt-PT")] == ["en-US"] * 4


def test_more_locales_than_the_spec_allows_are_listed_and_said_at_error(caplog):
    rows = [row("en-US", is_default=True)] + [row(f"x{i:01d}-X{i}") for i in range(14)]  # 15 listed
    with caplog.at_level(logging.ERROR):
        languages = languages_of(rows)
    assert len(orjson.loads(languages.body)["languages"]) == 15  # the truth: ?lang= serves all 15
    assert any("15 locales are listed" in r.getMessage() and "at most 14" in r.getMessage() for r in caplog.records)
    caplog.clear()
    languages_of(rows[:14])
    assert not caplog.records
