"""Search text: one normalization for what is indexed and for what is searched, whatever the
database's locale. Pure functions, no I/O.

PostgreSQL's text-search parser classifies and lower-cases characters by the database's
``LC_CTYPE``. Under the C locale (the embedded server's, and any database created with it)
every non-ASCII character counts as a letter and only ASCII letters are lower-cased:
"«Bitcoin»" and "l’ETF" are single words, "Биткоин" never matches "биткоин", and a Japanese
sentence is one word. Under other locales Japanese and Chinese still have no word
boundaries. So the projector hands the database normalized text (:func:`index_text`) and the
API normalizes a query the same way (:func:`query_text`):

1. NFKC: full-width Latin, half-width kana, ligatures and the like to their usual forms;
2. lower-cased by Unicode's rules (a Turkish dotted capital I to ``i``);
3. non-ASCII punctuation, symbols, separators and control characters to spaces, invisible
   format characters (soft hyphens, joiners, direction marks) dropped;
4. each run of Han, Hiragana, Katakana or Hangul (scripts written without spaces between
   words) to its overlapping character pairs: "利下げ観測" is indexed as "利下 下げ げ観 観測"
   and a query's run becomes the phrase of its pairs (``"利下 下げ"``), so a word is found
   anywhere inside a run of text. A run of one character stays one character and matches
   only a character standing alone.

ASCII is left to PostgreSQL, which treats it the same under every locale (and keeps its URL,
e-mail and number tokens).
"""

from __future__ import annotations

import operator
import re
import unicodedata
from typing import Iterable

#: Scripts written without spaces between words: Hangul Jamo, the CJK symbols' iteration
#: marks (々〆〇), Hiragana, Katakana, Hangul compatibility Jamo, Katakana extensions, CJK
#: Extension A, CJK Unified Ideographs, Hangul syllables, CJK compatibility ideographs, and
#: the ideographs of planes 2 and 3.
_PAIRED_BMP = (
    "\u1100-\u11ff\u3005-\u3007\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
)
_PAIRED_ASTRAL = "\U00020000-\U0003134f"

#: Where non-ASCII punctuation, symbols, separators and format characters are looked up:
#: planes 0 and 1. Planes 2 and 3 hold ideographs only, 4 to 13 nothing; plane 14's tags and
#: variation selectors and the private-use planes 15 and 16 are added whole (a test checks
#: this against every code point of the running Python's Unicode tables).
_SCANNED = range(0x80, 0x20000)
_TAGS = range(0xE0000, 0xE1000)
_PRIVATE = range(0xF0000, 0x110000)


def classify(codepoints: Iterable[int]) -> tuple[list[int], list[int]]:
    """The code points turned to spaces and the ones dropped, in order."""
    spaced, dropped = [], []
    for cp in codepoints:
        category = unicodedata.category(chr(cp))
        if category == "Cf" or (cp in _TAGS and category != "Cn"):
            dropped.append(cp)
        elif category[0] in "PSZ" or category in ("Cc", "Co"):
            spaced.append(cp)
    return spaced, dropped


def _ranges(codepoints: Iterable[int]) -> str:
    """A regular-expression class body for the sorted code points."""
    out: list[str] = []
    start = prev = -2
    for cp in [*codepoints, -2]:
        if cp == prev + 1:
            prev = cp
            continue
        if start >= 0:
            out.append(re.escape(chr(start)) + ("-" + re.escape(chr(prev)) if prev > start else ""))
        start = prev = cp
    return "".join(out)


class _Rules:
    """The compiled classes. A class of code points below U+10000 only is one table lookup
    per character in ``re``; one that reaches further is a search through its ranges, so
    characters beyond the BMP (emoji, rare ideographs) have classes of their own, used only
    on text that holds such a character."""

    def __init__(self) -> None:
        spaced, dropped = classify([*_SCANNED, *_TAGS])
        spaced += _PRIVATE
        bmp = lambda cps: [cp for cp in cps if cp < 0x10000]  # noqa: E731
        astral = lambda cps: [cp for cp in cps if cp >= 0x10000]  # noqa: E731
        self.odd = re.compile(f"[{_ranges(bmp(spaced + dropped))}]")
        self.odd_or_paired = re.compile(f"[{_ranges(bmp(spaced + dropped))}{_PAIRED_BMP}]")
        self.spaced = re.compile(f"[{_ranges(bmp(spaced))}]")
        self.dropped = re.compile(f"[{_ranges(bmp(dropped))}]")
        self.spaced_astral = re.compile(f"[{_ranges(astral(spaced))}]")
        self.dropped_astral = re.compile(f"[{_ranges(astral(dropped))}]")
        self.run = re.compile(f"([{_PAIRED_BMP}]+)")
        self.run_astral = re.compile(f"([{_PAIRED_BMP}{_PAIRED_ASTRAL}]+)")


_R = _Rules()
_add = operator.add
#: Quotation marks a query may use for a phrase, besides ASCII's.
_QUOTES = str.maketrans({q: '"' for q in "“”„‟«»「」『』〝〞"})


def _common(text: str) -> tuple[str, re.Pattern[str] | None]:
    """Steps 1 to 3, and the pattern of step 4's runs for this text (None: it has none)."""
    text = unicodedata.normalize("NFKC", text).replace("İ", "i").lower()
    if len(text.encode("utf-16-le", "surrogatepass")) != 2 * len(text):  # beyond the BMP: rare
        text = _R.dropped.sub("", _R.spaced.sub(" ", text))
        return _R.dropped_astral.sub("", _R.spaced_astral.sub(" ", text)), _R.run_astral
    first = _R.odd_or_paired.search(text)
    if first is None:
        return text, None
    if _R.odd.search(text, first.start()):
        text = _R.dropped.sub("", _R.spaced.sub(" ", text))
    return text, _R.run


def _pairs(run: str) -> str:
    return run if len(run) < 3 else " ".join(map(_add, run[:-1], run[1:]))


def index_text(text: str) -> str:
    """``text`` (a title, lede or body) as the database indexes it."""
    if text.isascii():
        return text
    text, runs = _common(text)
    if runs is None:
        return text
    parts = runs.split(text)  # text, run, text, run, ..., text
    if len(parts) > 1:
        parts[1::2] = map(_pairs, parts[1::2])
        text = " ".join(parts)
    return text


def query_text(q: str) -> str:
    """A search query (web-search syntax) normalized as :func:`index_text` normalizes the
    text it searches. A paired run outside quotes becomes a quoted phrase (after a ``-`` it
    stays excluded as a whole); inside quotes it joins the phrase."""
    if q.isascii():
        return q
    text, runs = _common(q.translate(_QUOTES))
    if runs is None:
        return text
    out: list[str] = []
    quoted = False
    last = 0
    for m in runs.finditer(text):
        before = text[last : m.start()]
        quoted ^= before.count('"') % 2 == 1
        out.append(before)
        pairs = _pairs(m.group())
        lead = "" if before.endswith("-") else " "
        if quoted:
            out.append(f" {pairs} ")
        elif " " in pairs:
            out.append(f'{lead}"{pairs}" ')
        else:
            out.append(f"{lead}{pairs} ")
        last = m.end()
    out.append(text[last:])
    return "".join(out)
