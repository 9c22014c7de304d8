"""The tests' signing key: the one ``controlplane.settings_test`` gives the control
plane (``SLUICE_SIGNING_KEY``, the same 32-byte seed), so that every gateway under
test, polling the real control plane or ``tests/client/protocol_server.py``,
trusts one key ring."""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sluice.signing import KeyRing

TEST_SIGNING_KEY = Ed25519PrivateKey.from_private_bytes(
    b"sluice-tests-only-not-a-secret!!"
)
#: What gateways under test trust.
TEST_KEYS = KeyRing([TEST_SIGNING_KEY])


def keys_file(folder: Path, keys: KeyRing = TEST_KEYS) -> Path:
    """``keys`` saved as ``sluice-keys.json`` in ``folder`` (for gateways in subprocesses)."""
    path = folder / "sluice-keys.json"
    path.write_text(json.dumps(keys.to_json()), encoding="utf-8")
    return path
