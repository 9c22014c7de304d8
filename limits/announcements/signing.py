"""How webhooks are signed: the Standard Webhooks specification (standardwebhooks.com).

Every delivery carries three headers:

* ``webhook-id``: the event id (the same on retries and resends: dedupe on it);
* ``webhook-timestamp``: when this attempt was signed, in Unix seconds;
* ``webhook-signature``: ``v1,<base64 of HMAC-SHA256(key, "<id>.<timestamp>.<body>")>``.

A secret is ``whsec_`` followed by the base64 of 32 random bytes, and the key is
those bytes, so receivers built on the ``standardwebhooks`` libraries or Svix
verify deliveries as they are.

**Secrets issued before Standard Webhooks** (``whsec_`` + 43 characters of the
URL-safe base64 alphabet, unpadded) are 32 random bytes too, and are signed with
those bytes. Standard base64 decoders do not read that alphabet, so until such a
secret is rotated its deliveries also carry the former header, which existing
receivers verify: ``Sluice-Signature: t=<timestamp>,v1=<hex HMAC-SHA256 of
"<timestamp>.<body>" keyed with the secret's text>``. ``docs/announcements.md``
describes the transition.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

__all__ = [
    "LEGACY_SIGNATURE_HEADER",
    "SECRET_PREFIX",
    "secret_generate",
    "secret_is_legacy",
    "signature_headers",
    "signing_key",
]

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
LEGACY_SIGNATURE_HEADER = "Sluice-Signature"
_URLSAFE_TO_STANDARD = str.maketrans("-_", "+/")


def secret_generate() -> str:
    """A new secret: ``whsec_`` and the standard base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signing_key(secret: str) -> bytes:
    """The HMAC key of ``secret``: its base64 decoded, in either alphabet, padded or not.

    Raises ``ValueError`` for a secret that is not base64 at all.
    """
    text = secret.removeprefix(SECRET_PREFIX).translate(_URLSAFE_TO_STANDARD)
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not a base64 webhook secret: {exc}") from None


def secret_is_legacy(secret: str) -> bool:
    """Whether ``secret`` predates Standard Webhooks (not in standard base64 as written)."""
    canonical = base64.b64encode(signing_key(secret)).decode()
    return secret.removeprefix(SECRET_PREFIX) != canonical


def _standard_signature(
    key: bytes, message_id: str, timestamp: int, body: bytes
) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _legacy_signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def signature_headers(
    *, secret: str, message_id: str, body: bytes, timestamp: int
) -> dict[str, str]:
    """The signature headers of ``body`` sent at ``timestamp`` as event ``message_id``."""
    headers = {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": _standard_signature(
            signing_key(secret), message_id, timestamp, body
        ),
    }
    if secret_is_legacy(secret):
        headers[LEGACY_SIGNATURE_HEADER] = _legacy_signature(secret, timestamp, body)
    return headers
