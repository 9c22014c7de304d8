"""Signed bundles: the control plane signs, every gateway verifies (Ed25519).

What is signed is the bundle body exactly as served (``docs/gateway-protocol.md``):
the canonical bytes before any gzip, the same bytes the ETag hashes. The signature
travels in the ``Sluice-Signature`` response header, ``<key id>:<base64 signature>``,
and in the last-known-good file beside the body (:mod:`.bundle`).

A gateway trusts the public keys of a :class:`KeyRing`, each under a key id, the
form the control plane publishes at ``/.well-known/sluice-keys.json``::

    {"keys": [{"kid": "k-1f0c...", "alg": "Ed25519", "key": "<base64 of 32 bytes>"}]}

A key id is derived from its key (:func:`key_id`), so a key and its id cannot
disagree. Several keys are trusted during a rotation's overlap.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from .errors import SnapshotError

__all__ = [
    "ALGORITHM",
    "KeyRing",
    "dev_signing_key",
    "key_id",
    "load_private_key",
    "public_key_bytes",
    "sign",
]

ALGORITHM = "Ed25519"


def public_key_bytes(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The 32 raw bytes of a public key (of a private key's public half)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """``k-`` and the first 16 hex digits of the SHA-256 of the raw public key."""
    return "k-" + hashlib.sha256(public_key_bytes(key)).hexdigest()[:16]


def sign(key: Ed25519PrivateKey, body: bytes) -> str:
    """The ``Sluice-Signature`` value of ``body``: ``<key id>:<base64 signature>``."""
    return f"{key_id(key)}:{base64.b64encode(key.sign(body)).decode('ascii')}"


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    """An Ed25519 private key from PEM (PKCS#8, ``openssl genpkey -algorithm ed25519``)."""
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"not an Ed25519 key but {type(key).__name__}")
    return key


def dev_signing_key(path: Path) -> Ed25519PrivateKey:
    """The key at ``path``, made there (mode 0600) if there is none: for a developer's
    machine, where the control plane and the demo gateways share one folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:  # O_EXCL: two processes starting together keep one key
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return load_private_key(_read_complete(path))
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return load_private_key(pem)


def _read_complete(path: Path) -> bytes:
    """The file's bytes once its writer has finished (a few ms at most)."""
    for _ in range(200):
        pem = path.read_bytes()
        if pem.rstrip().endswith(b"-----"):
            return pem
        os.sched_yield()
    return path.read_bytes()


class KeyRing:
    """The public keys a gateway trusts, by key id; verifies signed bundles."""

    def __init__(self, keys: Iterable[Ed25519PublicKey | Ed25519PrivateKey]) -> None:
        self._keys: dict[str, Ed25519PublicKey] = {}
        for key in keys:
            public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
            self._keys[key_id(public)] = public

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def key(self, kid: str) -> Ed25519PublicKey:
        """The public key of id ``kid`` (KeyError if it is not trusted)."""
        return self._keys[kid]

    def __len__(self) -> int:
        return len(self._keys)

    def to_json(self) -> dict[str, Any]:
        """The ``sluice-keys.json`` document of these keys."""
        return {
            "keys": [
                {
                    "kid": kid,
                    "alg": ALGORITHM,
                    "key": base64.b64encode(public_key_bytes(key)).decode("ascii"),
                }
                for kid, key in sorted(self._keys.items())
            ]
        }

    @classmethod
    def from_json(cls, data: Any) -> KeyRing:
        """Parse a ``sluice-keys.json`` document; ValueError naming what is wrong.

        A ``kid`` that is not the key's own id is refused: a typo must not
        silently trust nothing, or something else.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
            raise ValueError('a key set is an object with a "keys" array')
        keys = []
        for index, item in enumerate(data["keys"]):
            if not isinstance(item, Mapping) or item.get("alg") != ALGORITHM:
                raise ValueError(f'keys[{index}]: "alg" must be "{ALGORITHM}"')
            try:
                raw = base64.b64decode(str(item.get("key", "")), validate=True)
                key = Ed25519PublicKey.from_public_bytes(raw)
            except (binascii.Error, ValueError):
                raise ValueError(
                    f"keys[{index}].key: not the base64 of 32 bytes"
                ) from None
            if item.get("kid") != key_id(key):
                raise ValueError(
                    f"keys[{index}].kid: {item.get('kid')!r} is not this key's id {key_id(key)!r}"
                )
            keys.append(key)
        return cls(keys)

    @classmethod
    def load(cls, path: str | Path) -> KeyRing:
        """:meth:`from_json` of a file (the well-known document, saved)."""
        return cls.from_json(json.loads(Path(path).read_bytes()))

    def verify(self, body: bytes, signature: str | None) -> str:
        """Check that ``signature`` (``<key id>:<base64>``) signs ``body`` with a
        trusted key; return the key id. Raise SnapshotError(``signature``, why)."""
        if not signature:
            raise SnapshotError("signature", "the bundle is not signed")
        kid, _, encoded = signature.strip().partition(":")
        key = self._keys.get(kid)
        if key is None:
            trusted = ", ".join(self.ids) or "none"
            raise SnapshotError(
                "signature",
                f"signed with unknown key {kid[:40]!r} (trusted: {trusted})",
            )
        try:
            key.verify(base64.b64decode(encoded, validate=True), body)
        except (binascii.Error, ValueError, InvalidSignature):
            raise SnapshotError(
                "signature", f"the signature by key {kid!r} does not match the bundle"
            ) from None
        return kid
