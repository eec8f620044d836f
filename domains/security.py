"""Secrets: tokens are random, shown once, and stored only as SHA-256 hashes.

Tokens carry 256 bits of randomness, so a fast hash is enough (no need for a slow KDF);
lookups are by hash, and comparison happens inside the database index.
"""

from __future__ import annotations

import hashlib
import secrets


def generate_token(prefix: str) -> str:
    """A new secret such as `dpt_…` (user), `dpn_…` (node) or `dpj_…` (join)."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_prefix(raw: str, length: int = 10) -> str:
    """The visible part of a token, to tell tokens apart in lists."""
    return raw[:length]
