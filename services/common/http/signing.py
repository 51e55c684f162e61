"""Webhook signing, the Standard Webhooks way (docs/webhooks.md#verifying): pure functions.

Each message is signed with HMAC-SHA256 over ``"{webhook-id}.{webhook-timestamp}.{body}"``, the
body as the exact bytes sent; the ``webhook-signature`` header carries ``v1,<base64>`` once per
secret that signs (two during a rotation), separated by spaces.

An endpoint's secret is never stored or logged: it is derived from the operator's signing key
(``TICKERWIRE_WEBHOOKS_SIGNING_KEY``), the endpoint's id and its secret generation, when a
message is signed and once when the operator registers or rotates it (shown to them then). A
rotation raises the generation; anyone holding the signing key can derive every secret, so it
is kept like a database password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Iterable

#: What a secret is shown as: ``whsec_`` and the base64 of its bytes (the Standard Webhooks form).
SECRET_PREFIX = "whsec_"
#: The shortest signing key accepted, in bytes.
MIN_SIGNING_KEY_BYTES = 32
_CONTEXT = b"tickerwire webhook secret v1\x00"


def parse_signing_key(text: str) -> bytes:
    """The operator's signing key from its base64 text; ValueError saying why when it is not one."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except ValueError as e:
        raise ValueError("the webhook signing key must be base64") from e
    if len(key) < MIN_SIGNING_KEY_BYTES:
        raise ValueError(f"the webhook signing key must be at least {MIN_SIGNING_KEY_BYTES} bytes (base64 of them)")
    return key


def derive_secret(signing_key: bytes, endpoint_id: str, generation: int) -> bytes:
    """The secret of one generation of an endpoint: 32 bytes, the same on every process."""
    message = _CONTEXT + endpoint_id.encode() + b"\x00" + str(generation).encode()
    return hmac.new(signing_key, message, hashlib.sha256).digest()


def secret_text(secret: bytes) -> str:
    """The secret as a partner copies it into a verifier."""
    return SECRET_PREFIX + base64.b64encode(secret).decode()


def signature(secret: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of the exact body bytes."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()


def headers(webhook_id: str, timestamp: int, body: bytes, secrets: Iterable[bytes]) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt, signed by every secret given."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, webhook_id, timestamp, body) for s in secrets),
    }
