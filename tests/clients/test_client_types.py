"""The client library's types, as a partner's type checker sees them: the package is
``mypy --strict`` clean, every sync and async call reveals its model type (not ``Any``), and a
misspelt or mistyped argument is an error, not a silently accepted ``**kwargs``."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"

#: (expression, the type mypy must reveal for it). ``client`` is a ``Client``, ``aclient`` an
#: ``AsyncClient`` (inside ``async def``); ``where`` a ``PostFilter``.
REVEALED = [
    ('client.posts(where, lang="en-US", limit=5)', "tickerwire_client.models.Page"),
    (
        'client.posts(ticker=["BTC", "ETH"], sentiment=Sentiment.BULLISH, importance_min=50)',
        "tickerwire_client.models.Page",
    ),
    ('client.post(1, lang="de-DE")', "tickerwire_client.models.PostDetail"),
    ("client.categories()", "tickerwire_client.models.CategoryTree"),
    ('client.category("defi")', "tickerwire_client.models.Category"),
    ("client.tokens()", "tickerwire_client.models.TokenList"),
    ('client.token("BTC")', "tickerwire_client.models.TokenDetail"),
    ("client.sentiment_pulse()", "tickerwire_client.models.SentimentPulse"),
    ("client.languages()", "tickerwire_client.models.LanguageList"),
    ('client.search("etf", where, limit=10)', "tickerwire_client.models.Page"),
    ('client.iter_posts(where, direction="newer", after=1)', "typing.Iterator[tickerwire_client.models.PostLean]"),
    ('client.iter_search("etf", hashtag="etf")', "typing.Iterator[tickerwire_client.models.PostLean]"),
    ('client.stream(langs=["en-US"], start_after=5)', "tickerwire_client.sync.SyncPostStream"),
    ("next(client.stream())", "tickerwire_client.ordering.StreamPost"),
    ("client.posts().meta", "tickerwire_client.meta.ResponseMeta | None"),  # each call's own
    ('client.changes("c1~x", lang=["en-US"], limit=5)', "tickerwire_client.models.ChangesPage"),
    ("client.iter_changes()", "typing.Iterator[tickerwire_client.models.ChangesPage]"),
    ("client.webhook_endpoints()", "tickerwire_client.webhook_models.WebhookEndpointList"),
    ('client.webhook_endpoint("whe_x")', "tickerwire_client.webhook_models.WebhookEndpoint"),
    ('client.webhook_attempts("whe_x", limit=5)', "tickerwire_client.webhook_models.WebhookAttemptList"),
    (
        'client.create_webhook_endpoint("https://h.example", locales=["en-US"], idempotency_key="k")',
        "tickerwire_client.webhook_models.WebhookEndpointSecret",
    ),
    ('client.update_webhook_endpoint("whe_x", locales=None)', "tickerwire_client.webhook_models.WebhookEndpoint"),
    ('client.delete_webhook_endpoint("whe_x")', "tickerwire_client.meta.ResponseMeta"),
    ('client.pause_webhook_endpoint("whe_x")', "tickerwire_client.webhook_models.WebhookEndpoint"),
    ('client.resume_webhook_endpoint("whe_x")', "tickerwire_client.webhook_models.WebhookEndpoint"),
    ('client.rotate_webhook_secret("whe_x")', "tickerwire_client.webhook_models.WebhookEndpointSecret"),
    ('client.replay_webhook_endpoint("whe_x", cursor="c1~x")', "tickerwire_client.webhook_models.WebhookEndpoint"),
    ('client.send_webhook_test("whe_x")', "tickerwire_client.webhook_models.WebhookTestQueued"),
    ('await aclient.posts(where, lang="en-US")', "tickerwire_client.models.Page"),
    ('await aclient.token("BTC")', "tickerwire_client.models.TokenDetail"),
    ('aclient.iter_posts(category="defi")', "typing.AsyncIterator[tickerwire_client.models.PostLean]"),
    ('aclient.stream(tickers=["BTC"])', "tickerwire_client.stream.PostStream"),
    (
        'await aclient.replay_webhook_endpoint("whe_x", since="2026-12-05T09:30:00Z")',
        "tickerwire_client.webhook_models.WebhookEndpoint",
    ),
    ("aclient.iter_changes(limit=50)", "typing.AsyncIterator[tickerwire_client.models.ChangesPage]"),
]

#: Calls a typed signature refuses (each would pass unnoticed through ``Callable[..., Any]``).
REFUSED = [
    'client.posts(tickr="BTC")',  # a misspelt filter
    'client.posts(limit="5")',  # a string where an int goes
    "client.post()",  # the id is required
    "client.search(q=1)",  # the query is a string
    'client.stream(lang=["en-US"])',  # the option is langs
    "client.posts().postz",  # a page has no postz
    'client.token("BTC").ticker + 1',  # a ticker is a string
    'client.changes(limit="5")',  # a string where an int goes
    'client.replay_webhook_endpoint("whe_x")',  # neither since nor cursor
    'client.replay_webhook_endpoint("whe_x", since="2026-12-05T09:30:00Z", cursor="c1~x")',  # both
    'aclient.replay_webhook_endpoint("whe_x")',  # the same on the async client
    'client.update_webhook_endpoint("whe_x", urll="https://h.example")',  # a misspelt field
    'client.create_webhook_endpoint("https://h.example", idempotency_key=5)',  # a key is a string
    'client.rotate_webhook_secret("whe_x").secret + 1',  # a secret is a string
]

PRELUDE = """\
from tickerwire_client import AsyncClient, Client, PostFilter, Sentiment

client = Client("http://127.0.0.1:9/api/v1/developer", "k")
where = PostFilter(category="defi", since="2026-01-01T00:00:00Z")


async def main(aclient: AsyncClient) -> None:
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache: Path, cwd: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` with the library's own configuration, the library found through MYPYPATH."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(CLIENT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--show-error-codes",
            *targets,
        ],
        cwd=cwd,
        env=dict(os.environ, MYPYPATH=str(CLIENT / "src")),
        capture_output=True,
        text=True,
        timeout=300,
    )


def snippet(tmp_path: Path, name: str, lines: list[str]) -> tuple[Path, int]:
    """A module whose lines ``lines`` sit in ``main``; returns it and the number of ``lines[0]``."""
    path = tmp_path / name
    path.write_text(PRELUDE + "".join(f"    {line}\n" for line in lines))
    return path, PRELUDE.count("\n") + 1


def optional(revealed: str) -> str:
    """``Union[X, None]`` (mypy before 1.11) written as later versions write it, ``X | None``."""
    return re.sub(r"^Union\[(.+), None\]$", r"\1 | None", revealed)


def test_the_client_package_is_mypy_strict_clean(cache: Path, tmp_path: Path):
    run = mypy(cache, tmp_path, "-p", "tickerwire_client")
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_every_call_reveals_its_model_type(cache: Path, tmp_path: Path):
    path, first = snippet(tmp_path, "revealed.py", [f"reveal_type({expr})" for expr, _ in REVEALED])
    run = mypy(cache, tmp_path, path.name)
    notes = {
        line: optional(revealed)
        for line, revealed in re.findall(r"^revealed\.py:(\d+): note: Revealed type is \"(.+)\"$", run.stdout, re.M)
    }
    assert run.returncode == 0, run.stdout + run.stderr
    got = [notes.get(str(first + i)) for i in range(len(REVEALED))]
    assert got == [expected for _, expected in REVEALED], run.stdout


def test_a_misspelt_or_mistyped_argument_is_a_type_error(cache: Path, tmp_path: Path):
    path, first = snippet(tmp_path, "refused.py", REFUSED)
    run = mypy(cache, tmp_path, path.name)
    flagged = {int(n) for n in re.findall(r"^refused\.py:(\d+): error:", run.stdout, re.M)}
    missed = [call for i, call in enumerate(REFUSED) if first + i not in flagged]
    assert not missed, run.stdout


def test_the_modules_import_each_other_in_one_direction():
    """No module of the package imports one that imports it back (directly or through others),
    so each can be read, typed and loaded on its own: the stream does not know the client."""
    package = CLIENT / "src" / "tickerwire_client"
    imports = {
        path.stem: {
            node.module
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        }
        for path in package.glob("*.py")
    }

    def reached(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for module in imports.get(todo.pop(), set()) - seen:
                seen.add(module)
                todo.append(module)
        return seen

    assert "client" in imports["stream"] | imports["sync"] or "stream" in imports["client"]  # the graph was read
    assert [module for module in imports if module in reached(module)] == []
