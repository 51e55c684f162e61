"""Python client for the Tickerwire developer read API and its realtime stream.

``AsyncClient`` (asyncio) and ``Client`` (blocking) expose every endpoint with typed models;
``client.stream(...)`` delivers every new post exactly once and in order per locale across
reconnects. See README.md.
"""

from .client import AsyncClient
from .errors import (
    ApiError,
    BadgeMissing,
    ClientError,
    Forbidden,
    InternalError,
    InvalidState,
    NotAuthenticated,
    NotFound,
    QuotaExhausted,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    StreamLimitReached,
    Throttled,
    TickerwireError,
    TransportError,
    ValidationFailed,
    WorkspaceSuspended,
)
from .meta import Limits, LogMark, LogPosition, ResponseMeta
from .models import (
    Category,
    CategoryGroup,
    CategoryTree,
    Direction,
    Ecosystem,
    EcosystemRef,
    Exchange,
    Language,
    LanguageList,
    NamedRef,
    Page,
    PostDetail,
    PostLean,
    Sentiment,
    SentimentPulse,
    SentimentShare,
    Token,
    TokenDetail,
    TokenList,
)
from .ordering import StreamPost
from .retry import RetryPolicy
from .stream import PostStream, StreamStats
from .sync import Client

__all__ = [
    "ApiError",
    "AsyncClient",
    "BadgeMissing",
    "Category",
    "CategoryGroup",
    "CategoryTree",
    "Client",
    "ClientError",
    "Direction",
    "Ecosystem",
    "EcosystemRef",
    "Exchange",
    "Forbidden",
    "InternalError",
    "InvalidState",
    "Language",
    "LanguageList",
    "Limits",
    "LogMark",
    "LogPosition",
    "NamedRef",
    "NotAuthenticated",
    "NotFound",
    "Page",
    "PostDetail",
    "PostLean",
    "PostStream",
    "QuotaExhausted",
    "RateLimited",
    "ResponseMeta",
    "RetryPolicy",
    "Sentiment",
    "SentimentPulse",
    "SentimentShare",
    "ServerError",
    "ServiceUnavailable",
    "StreamLimitReached",
    "StreamPost",
    "StreamStats",
    "Throttled",
    "TickerwireError",
    "Token",
    "TokenDetail",
    "TokenList",
    "TransportError",
    "ValidationFailed",
    "WorkspaceSuspended",
]
