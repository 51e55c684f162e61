"""API keys: generation, hashing and display. Only the hash is ever stored or published."""

from __future__ import annotations

import hashlib
import hmac
import secrets

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
