"""API keys: generation, hashing and display, and the key a request presents. Only the hash
is ever stored or published."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from multidict import MultiMapping

KEY_PREFIX = "tw_live_"


def generate_key() -> str:
    """A new key: a recognizable prefix and 256 bits of randomness."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """SHA-256 of the key, hex. Keys are high-entropy, so a fast hash is sufficient."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def display_prefix(key: str) -> str:
    """What operators may see of a key: the prefix and the first four random characters."""
    return key[: len(KEY_PREFIX) + 4]


def hashes_match(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def looks_like_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX) and 16 <= len(value) <= 128 and value.isascii() and value.isprintable()


def authorization(headers: MultiMapping[str]) -> str | None:
    """The request's one ``Authorization`` header; None when absent or repeated. Two of them
    are ambiguous (a proxy reading the last and this server the first would disagree on who
    calls), so they authenticate nobody: 401, as for a malformed one."""
    values = headers.getall("Authorization", ())
    return values[0] if len(values) == 1 else None


def bearer_key(header: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, or None when malformed."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    value = value.strip()
    return value if looks_like_key(value) else None
