"""The search-text normalization shared by the index and the query (pure logic)."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from tests.support.events import post_ev
from tickerwire.services.readmodel.mapping import Taxonomy, translation_rows
from tickerwire.services.readmodel.searchtext import classify, index_text, query_text
from tickerwire.services.readmodel.upcast import post_v2


@pytest.mark.parametrize("text", ["Bitcoin rallies 5% (BTC) -- see https://x.example/a?b=1", "", "a\tb\nc"])
def test_ascii_is_left_to_the_database(text):
    assert index_text(text) is text and query_text(text) is text


@pytest.mark.parametrize(
    "text, indexed",
    [
        ("SOL、利下げ観測を受けて急落", "sol  利下 下げ げ観 観測 測を を受 受け けて て急 急落 "),
        ("«Bitcoin» l’ETF", " bitcoin  l etf"),
        ("Биткоин ВЫРОС", "биткоин вырос"),
        ("비트코인이 상승", " 비트 트코 코인 인이   상승 "),
        ("ＢＴＣ ﬁnance", "btc finance"),  # NFKC: full-width Latin, ligature
        ("Bit\u00adcoin\u200b rally", "bitcoin rally"),  # soft hyphen and zero-width space dropped
        ("İstanbul\u00a0borsası", "istanbul borsası"),  # dotted capital I; no-break space
        ("A 利 B", "a  利  b"),  # a run of one character stays one
        ("₿ 100 € 🚀", "  100    "),  # symbols and emoji are not words
    ],
)
def test_index_text(text, indexed):
    assert index_text(text) == indexed


@pytest.mark.parametrize(
    "q, normalized",
    [
        ("利下げ", ' "利下 下げ" '),
        ("-利下げ SOL", '-"利下 下げ"  sol'),  # excluded as a whole
        ('"SOL 利下げ"', '"sol  利下 下げ "'),  # inside quotes: part of the phrase
        ("SOL利下げ", 'sol "利下 下げ" '),
        ("«Bitcoin ETF» -急落", '"bitcoin etf" -急落 '),  # guillemets quote; a two-character run is one pair
        ("「利下げ観測」", '" 利下 下げ げ観 観測 "'),
        ("急 BTC", " 急  btc"),
        ("Биткоин OR Эфир", "биткоин or эфир"),
    ],
)
def test_query_text(q, normalized):
    assert query_text(q) == normalized


def test_a_query_is_normalized_as_the_text_it_searches():
    """Every query word, normalized, is one of the indexed words of the text it came from
    (ASCII compared lower-cased: the database lower-cases it on both sides)."""
    for text in [
        "SOL、利下げ観測を受けて急落",
        "«Bitcoin» grimpe après l’ETF",
        "Биткоин вырос на 5%",
        "比特币价格创下新高",
    ]:
        words = set(index_text(text).split())
        for piece in ["Bitcoin", "ETF", "Биткоин", "利下げ", "創下新高", "创下新高", "价格"]:
            if piece.lower() in text.lower():
                q = query_text(piece).lower().replace('"', " ").split()
                assert q and set(q) <= words, (text, piece, q)


def test_translation_rows_carry_the_indexed_text():
    post = post_v2(post_ev(1, langs=("ja-JP",)).data)
    post = post.model_copy(update={"translations": [post.translations[0].model_copy(update={"title": "利下げ観測"})]})
    (row,) = translation_rows(post, Taxonomy({}))
    assert row.title == index_text("利下げ観測") == " 利下 下げ げ観 観測 "
    assert '"title":"利下げ観測"' in row.lean  # what partners read is the text as published


def test_the_scanned_planes_hold_every_character_the_rules_name():
    """The classes are built from planes 0 and 1, plane 14 and the private-use planes
    (start-up time); every other code point of this Python's Unicode tables is a letter or
    unassigned, so the full scan names no other character."""
    spaced, dropped = classify(range(0x80, sys.maxunicode + 1))
    outside = [cp for cp in spaced + dropped if 0x20000 <= cp < 0xE0000]
    assert outside == []
    assert {unicodedata.category(chr(cp)) for cp in range(0x20000, 0xE0000)} <= {"Lo", "Cn"}
