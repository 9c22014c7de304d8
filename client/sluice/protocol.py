"""The gateway protocol's names, shared by the control plane and every gateway.

Also the one field Sluice adds to the answers gateways give clients (:data:`DEGRADED`).

A gateway polls ``GET /api/v1/snapshot`` (``docs/gateway-protocol.md``) and
reports, on every poll, who it is and which version it enforces. The control
plane reads these headers and the client writes them: both import them from here.
"""

from __future__ import annotations

__all__ = [
    "APPLIED_VERSION",
    "DEGRADED",
    "GATEWAY_ID",
    "MAX_REJECTED_REASON",
    "REHEARSED_VERSION",
    "REJECTED_REASON",
    "REJECTED_VERSION",
    "SIGNATURE",
    "SIGNING_KEYS_PATH",
    "SNAPSHOT_PATH",
]

#: Where the bundle of snapshots is served, under the control plane's URL.
SNAPSHOT_PATH = "/api/v1/snapshot"
#: A stable id of the gateway (its host name, say): the fleet page's row.
GATEWAY_ID = "Sluice-Gateway-Id"
#: The version the gateway enforces now (absent before its first snapshot).
APPLIED_VERSION = "Sluice-Applied-Version"
#: The scheduled version the gateway rehearses beside the one it enforces
#: (absent when none is scheduled): ``docs/rehearsal.md``.
REHEARSED_VERSION = "Sluice-Rehearsed-Version"
#: A version the gateway refused to switch to, and why (one line).
REJECTED_VERSION = "Sluice-Rejected-Version"
REJECTED_REASON = "Sluice-Rejected-Reason"
#: On an answer decided without Redis: the failure mode that decided it
#: (``open``, ``local``, ``closed``, ``open-unbounded``; ``docs/enforcement.md``).
DEGRADED = "Sluice-Degraded"
#: The control plane keeps this many characters of a rejection reason.
MAX_REJECTED_REASON = 300
#: The bundle's Ed25519 signature, ``<key id>:<base64>`` (``sluice.signing``).
SIGNATURE = "Sluice-Signature"
#: Where the control plane publishes the public keys it signs with.
SIGNING_KEYS_PATH = "/.well-known/sluice-keys.json"
