"""Figures and formats the docs quote, held to the code: the default of a duration setting written
next to its name (`TICKERWIRE_WEBHOOKS_LEASE_TTL_S`, 30 s), a few defaults the prose quotes
without the name, and every resume cursor written in the markdown (``c1~…``), which must have the
prefix and form of services/readmodel/cursors.py. docs/configuration.md is generated from the
settings (tests/unit/test_config.py), so it is not read here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.runtime.config import describe
from tickerwire.services.readmodel import cursors

REPO = Path(__file__).parents[2]

#: Seconds per unit the docs write durations in.
UNITS = {
    "ms": 0.001,
    "s": 1,
    "second": 1,
    "seconds": 1,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "day": 86400,
    "days": 86400,
}
_UNIT = "|".join(sorted(UNITS, key=len, reverse=True))
#: A duration setting's name in backticks, then at once its figure: "`X`, 30 s", "`X` (5 days)",
#: "`X` (default 2 s)", "`X`, 30 s by default".
NAMED = re.compile(rf"`(TICKERWIRE_[A-Z0-9_]+_M?S)`\s*[,(]\s*(?:default\s+)?([0-9][0-9,]*(?:\.[0-9]+)?)\s*({_UNIT})\b")
#: Defaults the prose quotes without naming the setting: (file, the figure's pattern, the setting).
UNNAMED = [
    ("docs/webhooks.md", re.compile(r"quickly \(within ([0-9.]+) s\)"), "TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S"),
    ("docs/webhooks.md", re.compile(r"no answer within ([0-9.]+) s"), "TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S"),
]

#: A token that looks like a cursor: ``c1`` then a separator, not inside a longer word or path.
CURSORISH = re.compile(r"(?<![\w/.~-])c1[^\w\s][^\s\"'`)\],]*")
#: Cursor values in JSON examples and query strings.
CURSOR_VALUES = re.compile(r"\"cursor\"\s*:\s*\"([^\"]*)\"|[?&](?:cursor|resume)=([^&\s`)\"']+)")
ELIDED = ("…", "...")


def defaults_in_seconds() -> dict[str, float]:
    out = {}
    for var, default in describe(FullConfig):
        if var.endswith("_S") or var.endswith("_MS"):
            out[var] = float(default) * (0.001 if var.endswith("_MS") else 1)
    return out


def markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in listed.stdout.split() if name != "docs/configuration.md"]


def quoted_durations(text: str) -> list[tuple[str, float, str]]:
    """(variable, seconds, as written) of every duration figure written next to a setting's name."""
    return [(m[1], float(m[2].replace(",", "")) * UNITS[m[3]], m[0].replace("\n", " ")) for m in NAMED.finditer(text)]


def test_every_duration_quoted_next_to_a_setting_is_its_default():
    defaults = defaults_in_seconds()
    wrong, seen = [], 0
    for path in markdown_files():
        for var, seconds, written in quoted_durations(path.read_text()):
            seen += 1
            if var not in defaults:
                wrong.append(f"{path.relative_to(REPO)}: {written!r}: no duration setting {var}")
            elif abs(seconds - defaults[var]) > 1e-9:
                wrong.append(f"{path.relative_to(REPO)}: {written!r}, but the default is {defaults[var]:g} s")
    assert seen >= 10, "the pattern no longer finds the quoted defaults"
    assert wrong == [], "docs quote a default the code does not have:\n" + "\n".join(wrong)


def test_the_webhook_lease_and_attempt_timeout_are_quoted_in_the_runbooks():
    found = {var for var, _, _ in quoted_durations((REPO / "docs/operations.md").read_text())}
    assert {"TICKERWIRE_WEBHOOKS_LEASE_TTL_S", "TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S"} <= found


@pytest.mark.parametrize(("doc", "pattern", "var"), UNNAMED, ids=[f"{d}:{v}" for d, _, v in UNNAMED])
def test_defaults_the_prose_quotes_without_their_name(doc, pattern, var):
    figures = [float(m[1]) for m in pattern.finditer((REPO / doc).read_text())]
    assert figures, f"{doc} no longer says {pattern.pattern!r}: update this test"
    assert set(figures) == {defaults_in_seconds()[var]}, f"{doc}: {pattern.pattern} quotes {figures}, {var} is not"


def test_the_figure_pattern_catches_a_wrong_default():
    text = "(`TICKERWIRE_WEBHOOKS_LEASE_TTL_S`, 15 s) and `TICKERWIRE_WEBHOOKS_DISABLE_AFTER_S` (5 days)"
    assert quoted_durations(text) == [
        ("TICKERWIRE_WEBHOOKS_LEASE_TTL_S", 15.0, "`TICKERWIRE_WEBHOOKS_LEASE_TTL_S`, 15 s"),
        ("TICKERWIRE_WEBHOOKS_DISABLE_AFTER_S", 432000.0, "`TICKERWIRE_WEBHOOKS_DISABLE_AFTER_S` (5 days"),
    ]
    assert defaults_in_seconds()["TICKERWIRE_WEBHOOKS_LEASE_TTL_S"] != 15.0


def written_cursors(text: str) -> list[str]:
    """Every cursor token the text writes: a ``c1``-prefixed token, or a cursor value in a JSON
    example or a query string that is not a placeholder (``<cursor>``, ``{cursor}``, empty)."""
    found = [m[0] for m in CURSORISH.finditer(text)]
    for m in CURSOR_VALUES.finditer(text):
        value = m[1] if m[1] is not None else m[2]
        if value and value[0] not in "<{" and not value.isupper():
            found.append(value)
    return list(dict.fromkeys(found))


def bad_cursor(token: str) -> str | None:
    if not token.startswith(cursors.PREFIX):
        return f"{token!r} does not start with {cursors.PREFIX!r}"
    if not token.endswith(ELIDED) and not re.fullmatch(cursors.PATTERN, token):
        return f"{token!r} is not of the form {cursors.PATTERN}"
    return None


def test_every_cursor_written_in_the_docs_has_the_real_format():
    wrong, seen = [], 0
    for path in markdown_files():
        for token in written_cursors(path.read_text()):
            seen += 1
            if (why := bad_cursor(token)) is not None:
                wrong.append(f"{path.relative_to(REPO)}: {why}")
    assert seen >= 2, "fewer than two cursors found in the docs found in the docs: the pattern no longer matches them"
    assert wrong == [], "\n".join(wrong)


def test_the_cursor_check_refuses_another_separator_and_takes_a_real_cursor():
    real = cursors.encode("5d71cd8b84d9", {0: (10, ""), 1: (12, "en-US")})
    assert written_cursors(f'{{"cursor":"{real}"}}') == [real] and bad_cursor(real) is None
    assert bad_cursor("c1.…") is not None and written_cursors('"cursor":"c1.…"') == ["c1.…"]
    assert written_cursors("GET /changes?cursor=<cursor> and resume=") == []
