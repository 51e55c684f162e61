"""GET /search finds words in every script the locales use, whatever the database's locale
(the test database, like the embedded one, is created with the C locale, under which
PostgreSQL alone lower-cases only ASCII, counts every non-ASCII character as a letter and
never splits Japanese, Chinese or Korean text): the API app in process over a real PostgreSQL
read model that the in-process projector filled from these posts."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from tests.support.apps import ReadModel, api_served
from tests.support.events import T0, locale_ev, post_ev
from tests.support.stack import BASE, auth
from tickerwire.devstack.embedded.postgres import scratch_database

#: (post id, locale, title, lede, body): one post per locale.
TEXTS = [
    (
        1,
        "ja-JP",
        "SOL、利下げ観測を受けて急落",
        "ＥＴＦへの資金流入が続いた。",
        "トレーダーは流動性への懸念を注視している。",
    ),
    (2, "zh-CN", "比特币价格创下新高", "市场情绪乐观，交易量上升。", "分析师认为，资金流入仍在继续。"),
    (3, "ko-KR", "비트코인이 상승했다", "거래량이 늘었다.", "트레이더들은 유동성 우려에 주목하고 있다."),
    (4, "ru-RU", "Биткоин вырос на 5%", "Рынок ожил.", "Трейдеры следят за ликвидностью."),
    (5, "fr-FR", "«Bitcoin» grimpe après l’ETF", "Le marché reprend des couleurs.", "Les traders restent prudents."),
    (6, "de-DE", "„Ethereum“ steigt", "Über dem Widerstand.", "Händler bleiben vorsichtig."),
    (7, "en-US", "ＢＴＣ rallies — Bitcoin’s best week", "Markets moved.", "Prices rose sharply."),
    (8, "tr-TR", "İstanbul borsasında kripto rallisi", "Piyasa hareketlendi.", "Yatırımcılar temkinli."),
]


@pytest.fixture(scope="module")
async def search(pg_dsn):
    locales = [locale_ev(lang, default=lang == "en-US", position=i) for i, (_, lang, *_) in enumerate(TEXTS)]
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn)
        await model.project(
            [
                *locales,
                *(
                    post_ev(
                        i, at=T0, langs=(lang,), sentiment="NEUTRAL", hashtags=(), title=title, lede=lede, body=body
                    )
                    for i, lang, title, lede, body in TEXTS
                ),
            ]
        )
        key = await model.provision("ws_search_text", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        async with api_served(dsn) as api, aiohttp.ClientSession() as http:

            async def ids(lang: str, q: str) -> list[int]:
                async with http.get(
                    api.url + BASE + "/search", params={"q": q, "lang": lang}, headers=auth(key)
                ) as resp:
                    body = await resp.read()
                    assert resp.status == 200, body[:300]
                    return [p["id"] for p in orjson.loads(body)["posts"]]

            yield ids


@pytest.mark.parametrize(
    "lang, q, found",
    [
        # A word inside a run of Japanese, Chinese or Korean text, and Latin text next to CJK punctuation.
        ("ja-JP", "利下げ", [1]),
        ("ja-JP", "観測を受けて", [1]),
        ("ja-JP", "SOL", [1]),
        ("ja-JP", "etf 資金流入", [1]),  # full-width ＥＴＦ in the lede
        ("ja-JP", "流動性への懸念", [1]),
        ("ja-JP", "下げ利", []),  # the same characters in another order
        ("ja-JP", "-利下げ SOL", []),  # the excluded run as a whole
        ("ja-JP", "「利下げ観測」", [1]),  # Japanese quotation marks make a phrase
        ("zh-CN", "创下新高", [2]),
        ("zh-CN", "比特币 交易量", [2]),
        ("zh-CN", "新高创下", []),
        ("ko-KR", "비트코인", [3]),
        ("ko-KR", "유동성 우려", [3]),
        # Letters that are not ASCII, in any case, and words next to typographic punctuation.
        ("ru-RU", "биткоин", [4]),
        ("ru-RU", "БИТКОИН", [4]),
        ("ru-RU", "рынок", [4]),
        ("fr-FR", "bitcoin", [5]),
        ("fr-FR", "etf", [5]),
        ("fr-FR", "«bitcoin grimpe»", [5]),
        ("fr-FR", "«grimpe bitcoin»", []),
        ("de-DE", "ethereum", [6]),
        ("de-DE", "händler", [6]),
        ("de-DE", "HÄNDLER VORSICHTIG", [6]),
        ("en-US", "btc", [7]),
        ("en-US", "bitcoin", [7]),
        ("en-US", "best week", [7]),
        ("tr-TR", "istanbul", [8]),
        # A query of punctuation or symbols alone has no word: nothing, not an error.
        ("fr-FR", "«»« —", []),
        ("en-US", "🚀🚀🚀", []),
    ],
)
async def test_search_finds_words_in_every_script(search, lang, q, found):
    assert await search(lang, q) == found
