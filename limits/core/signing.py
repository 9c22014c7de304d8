"""The control plane's Ed25519 signing key, kept outside the database.

``SLUICE_SIGNING_KEY`` (the PEM itself, an environment secret) or
``SLUICE_SIGNING_KEY_FILE`` (a path to it) names the key that signs every
gateway bundle and every audit checkpoint. With neither set, a development key
is made on first use at ``.sluice/signing-key.pem`` (the demo's gateways trust
the same file). ``SLUICE_SIGNING_PUBLIC_KEYS_FILE`` adds public keys (a
``sluice-keys.json`` document) published beside the signing key's: the next key
before a rotation, the previous one during its overlap
(``docs/operator-guide.md``, "Signing keys").
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from sluice.signing import KeyRing, dev_signing_key, load_private_key, sign

__all__ = ["DEV_KEY_PATH", "bundle_sign", "public_keyring", "signing_key"]

logger = logging.getLogger("sluice.signing")

#: Where the development key is made when no key is configured.
DEV_KEY_PATH = Path(".sluice/signing-key.pem")


def signing_key() -> Ed25519PrivateKey:
    """The key that signs now (read once per process: restart to rotate)."""
    return _signing_key(settings.SLUICE_SIGNING_KEY, settings.SLUICE_SIGNING_KEY_FILE)


@functools.cache
def _signing_key(pem: str, path: str) -> Ed25519PrivateKey:
    try:
        if pem:
            return load_private_key(pem.encode())
        if path:
            return load_private_key(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        source = "SLUICE_SIGNING_KEY" if pem else f"SLUICE_SIGNING_KEY_FILE={path}"
        raise ImproperlyConfigured(f"{source}: not an Ed25519 PEM key: {exc}") from None
    existed = DEV_KEY_PATH.exists()
    key = dev_signing_key(DEV_KEY_PATH)
    if not existed:
        logger.warning(
            "signing.dev_key_created: %s; set SLUICE_SIGNING_KEY_FILE in production",
            DEV_KEY_PATH.resolve(),
        )
    return key


def public_keyring() -> KeyRing:
    """The keys published at ``/.well-known/sluice-keys.json``: the signing key's
    public half and those of ``SLUICE_SIGNING_PUBLIC_KEYS_FILE``."""
    extra = settings.SLUICE_SIGNING_PUBLIC_KEYS_FILE
    keys = [signing_key().public_key()]
    if extra:
        try:
            ring = KeyRing.load(extra)
        except (OSError, ValueError) as exc:
            raise ImproperlyConfigured(
                f"SLUICE_SIGNING_PUBLIC_KEYS_FILE={extra}: {exc}"
            ) from None
        keys += [ring.key(kid) for kid in ring.ids]
    return KeyRing(keys)


def bundle_sign(body: bytes) -> str:
    """The ``Sluice-Signature`` of a bundle's final bytes."""
    return sign(signing_key(), body)
