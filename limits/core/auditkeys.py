"""The audit log's HMAC keys: held by the application, never by the database.

Each entry's hash is an HMAC-SHA256 under one of these keys (``limits.core.chain``),
so whoever can only write to the database cannot make an entry that verifies.

``SLUICE_AUDIT_KEYS`` (an environment secret) or the file ``SLUICE_AUDIT_KEYS_FILE``
lists them, comma- or line-separated, each ``<key id>:<base64 secret>[:<last entry>]``.
The first keys new entries; every one listed verifies. ``<last entry>`` retires a
key: entries it keyed after that id are refused (a compromised key, once every
process has moved on). With neither set, a development key is made on first use
at ``.sluice/audit-keys``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["DEV_KEYS_PATH", "AuditKey", "audit_keys", "parse_audit_keys"]

logger = logging.getLogger("sluice.audit")

#: Where the development key is made when no key is configured.
DEV_KEYS_PATH = Path(".sluice/audit-keys")

_KID = re.compile(r"^[A-Za-z0-9._-]{1,32}$")


@dataclass(frozen=True, slots=True)
class AuditKey:
    """One HMAC key of the audit chain."""

    kid: str  #: stored in each entry it keys (``AuditEntry.key_id``)
    secret: bytes = b""
    until: int | None = None  #: the last entry id it may key (retired); None: in use

    def __repr__(self) -> str:  # never the secret in a log or a traceback
        return f"AuditKey({self.kid!r}, until={self.until})"


def parse_audit_keys(text: str) -> tuple[AuditKey, ...]:
    """The keys of ``text`` (``kid:base64[:until]``, comma- or line-separated);
    ValueError naming the entry that is wrong."""
    keys = []
    for index, item in enumerate(i.strip() for i in re.split(r"[,\n]", text)):
        if not item:
            continue
        kid, _, rest = item.partition(":")
        encoded, _, until = rest.partition(":")
        try:
            secret = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            secret = b""
        if not _KID.match(kid) or len(secret) < 16 or (until and not until.isdigit()):
            raise ValueError(
                f"audit key {index + 1}: expected <id>:<base64 of 16 bytes or more>"
                "[:<last entry id>]"
            )
        keys.append(AuditKey(kid, secret, int(until) if until else None))
    if not keys:
        raise ValueError("no audit key")
    if keys[0].until is not None:
        raise ValueError(f"audit key {keys[0].kid}: the first key keys new entries")
    return tuple(keys)


def audit_keys() -> tuple[AuditKey, ...]:
    """The configured keys, the one that keys new entries first."""
    return _audit_keys(settings.SLUICE_AUDIT_KEYS, settings.SLUICE_AUDIT_KEYS_FILE)


@functools.cache
def _audit_keys(inline: str, path: str) -> tuple[AuditKey, ...]:
    source = "SLUICE_AUDIT_KEYS" if inline else f"SLUICE_AUDIT_KEYS_FILE={path}"
    try:
        if inline:
            return parse_audit_keys(inline)
        if path:
            return parse_audit_keys(Path(path).read_text(encoding="utf-8"))
        return parse_audit_keys(_dev_keys())
    except (OSError, ValueError) as exc:
        raise ImproperlyConfigured(f"{source}: {exc}") from None


def _dev_keys() -> str:
    line = f"dev-{secrets.token_hex(4)}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
    DEV_KEYS_PATH.parent.mkdir(parents=True, exist_ok=True)
    try:  # O_EXCL: two processes starting together keep one key
        fd = os.open(DEV_KEYS_PATH, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return DEV_KEYS_PATH.read_text(encoding="utf-8")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(line)
    logger.warning(
        "audit.dev_key_created: %s; set SLUICE_AUDIT_KEYS in production",
        DEV_KEYS_PATH.resolve(),
    )
    return line
