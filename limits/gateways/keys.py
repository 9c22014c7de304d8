"""Every Redis key of the gateway protocol, in the control plane's Redis (``REDIS_URL``).

============================== ===============================================================
``sluice:snapshots:bundle``    hash: the bundle gateways poll, its ETag and generation
                               (``limits.gateways.bundle``)
``sluice:fleet:gateways``      hash: gateway id -> its last report, JSON (``limits.gateways.fleet``)
``sluice:gateway-token:<sha>`` string: a gateway token Redis vouches for, by the SHA-256 of its
                               secret; expires (``limits.gateways.tokens``)
``sluice:metrics:counters``    hash: counters every web process adds to, such as polls by result
                               (``limits.gateways.counters``)
``SLUICE_DECISION_STREAM``     stream (default ``sluice:decisions``): decision events gateways
                               write (``sluice.metrics``), read by the consumer group
                               ``sluice-stats`` (``limits.traffic.stats``)
============================== ===============================================================
"""

from __future__ import annotations

from django.conf import settings

__all__ = [
    "BUNDLE_KEY",
    "COUNTERS_KEY",
    "DECISION_GROUP",
    "FLEET_KEY",
    "decision_stream",
    "gateway_token_key",
]

BUNDLE_KEY = "sluice:snapshots:bundle"
FLEET_KEY = "sluice:fleet:gateways"
COUNTERS_KEY = "sluice:metrics:counters"
#: The consumer group of the decision stream that the traffic statistics read with.
DECISION_GROUP = "sluice-stats"


def gateway_token_key(digest: str) -> str:
    """The cache entry of the gateway token whose secret hashes to ``digest``."""
    return f"sluice:gateway-token:{digest}"


def decision_stream() -> str:
    """The stream gateways write decision events to (``SLUICE_DECISION_STREAM``)."""
    return str(settings.SLUICE_DECISION_STREAM)
