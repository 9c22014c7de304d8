"""Secrets the control plane must be able to read back: encrypted at rest with Fernet.

Webhook signing secrets cannot be hashed like API tokens (signing needs the
secret itself), so they are encrypted with ``settings.SLUICE_SECRET_KEYS``
(``cryptography``'s MultiFernet: the first key encrypts, every key decrypts, so
keys can be rotated). Without configured keys, one is derived from SECRET_KEY,
which then must not change. A database dump alone does not reveal the secrets.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings

__all__ = ["secret_decrypt", "secret_encrypt"]


def _fernet() -> MultiFernet:
    keys = list(settings.SLUICE_SECRET_KEYS)
    if not keys:
        digest = hashlib.sha256(
            b"sluice.secrets:" + settings.SECRET_KEY.encode()
        ).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return MultiFernet([Fernet(key) for key in keys])


def secret_encrypt(secret: str) -> str:
    """The stored form of ``secret``: a Fernet token (text)."""
    return _fernet().encrypt(secret.encode()).decode()


def secret_decrypt(stored: str) -> str:
    """The secret back from its stored form; raises ``cryptography.fernet.InvalidToken``
    when no configured key can read it."""
    return _fernet().decrypt(stored.encode()).decode()
