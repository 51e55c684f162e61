"""The request bodies of the partner's webhook endpoint changes (docs/api.md#managing-endpoints;
schemas/openapi.json#/components/schemas/WebhookEndpointCreate and its siblings): JSON objects
of at most :data:`MAX_BODY_BYTES`, unknown fields refused, every refusal a 400
``VALIDATION_FAILED`` naming the field (a 413 for a larger body)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import orjson
import pydantic
from aiohttp import web
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from ..common.http.envelope import ApiError
from ..readmodel.endpoint_changes import FILTERS, endpoint_filter
from ..readmodel.snapshots import BadArgument

#: Largest body of a change (the contract's 8 KiB; the listener's own bound is larger).
MAX_BODY_BYTES = 8192

#: An Idempotency-Key: 1 to 255 printable ASCII characters.
IDEMPOTENCY_KEY = "Idempotency-Key"

_Filter = Annotated[list[Annotated[str, StringConstraints(max_length=64)]], Field(max_length=20)] | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EndpointCreate(_Body):
    url: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    description: Annotated[str, StringConstraints(max_length=200)] = ""
    locales: _Filter = None
    tickers: _Filter = None
    categories: _Filter = None


class EndpointUpdate(_Body):
    url: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = ""
    description: Annotated[str, StringConstraints(max_length=200)] = ""
    locales: _Filter = None
    tickers: _Filter = None
    categories: _Filter = None


class ReplayRequest(_Body):
    since: AwareDatetime | None = None
    cursor: Annotated[str, StringConstraints(min_length=1, max_length=4096)] | None = None


def refused(message: str, field: str | None) -> ApiError:
    return ApiError(400, "VALIDATION_FAILED", message, field=field)


async def json_object(request: web.Request) -> dict[str, Any]:
    """The request's JSON object: 413 past :data:`MAX_BODY_BYTES`, 400 for anything else than
    ``application/json`` holding one object."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, "PAYLOAD_TOO_LARGE", f"A request body may have at most {MAX_BODY_BYTES} bytes.")
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "PAYLOAD_TOO_LARGE", f"A request body may have at most {MAX_BODY_BYTES} bytes.")
    if request.content_type != "application/json":
        raise refused("The request body must be JSON, sent with Content-Type: application/json.", "Content-Type")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise refused("The request body is not valid JSON.", "body") from None
    if not isinstance(body, dict):
        raise refused("The request body must be a JSON object.", "body")
    return body


def parsed(model: type[_Body], body: dict[str, Any]) -> Any:
    """``body`` as ``model``, or the 400 naming the first field at fault."""
    try:
        return model.model_validate(body)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"]) or "body"
        if err["type"] == "extra_forbidden":
            raise refused(f"Unknown field {field!r}.", field) from None
        raise refused(f"{field}: {err['msg']}.", field) from None


def filters(body: BaseModel, names: set[str]) -> dict[str, list[str] | None]:
    """The filters of ``body`` that ``names`` holds, in the stream's grammar (docs/api.md#stream:
    locales in BCP 47 case, tickers upper-case, repeats once); None: no restriction."""
    out: dict[str, list[str] | None] = {}
    for name in FILTERS:
        if name not in names:
            continue
        values = getattr(body, name)
        if values is not None and any("," in v for v in values):
            raise refused(f"{name}: a value may not hold a comma.", name)
        try:
            out[name] = None if values is None else endpoint_filter(",".join(values), name, option=name)
        except BadArgument as exc:
            raise refused(str(exc), name) from None
    return out


def update_fields(body: EndpointUpdate) -> dict[str, Any]:
    """What an update changes: the fields it names (a filter set to null: no restriction)."""
    given = set(body.model_fields_set)
    if not given:
        raise refused("Name at least one of url, description, locales, tickers, categories.", "body")
    out: dict[str, Any] = {name: getattr(body, name) for name in ("url", "description") if name in given}
    out.update(filters(body, given))
    return out


def replay_start(body: ReplayRequest) -> tuple[str | None, datetime | None]:
    """``(cursor, since)``, exactly one of them."""
    if (body.cursor is None) == (body.since is None):
        raise refused("Give exactly one of since (an RFC 3339 time) or cursor (a resume cursor).", "body")
    return body.cursor, body.since


def idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_KEY)
    if key is None:
        return None
    if not 1 <= len(key) <= 255 or not all(" " <= c <= "~" for c in key):
        raise refused("Idempotency-Key: 1 to 255 printable ASCII characters.", IDEMPOTENCY_KEY)
    return key
