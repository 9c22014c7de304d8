"""Counters that every web process adds to, kept in one Redis hash (``keys.COUNTERS_KEY``).

``GET /metrics`` (``limits.traffic.metrics``) serves them for the whole control
plane, whichever process answers the scrape.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import redis

from limits.core.store import redis_client
from limits.gateways.keys import COUNTERS_KEY

__all__ = ["REDIS_COUNTERS", "SNAPSHOT_POLLS", "counter_field", "metric_increment"]

#: For the snapshot endpoint: ``metric_increment(SNAPSHOT_POLLS, labels={"result": "304"})``.
SNAPSHOT_POLLS = "sluice_snapshot_polls_total"
#: Every counter kept in Redis, with its help text.
REDIS_COUNTERS = {SNAPSHOT_POLLS: "Gateway polls of the snapshot endpoint, by result."}


def metric_increment(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    amount: int = 1,
    client: Any = None,
) -> None:
    """Add ``amount`` to a counter shared by every process: one HINCRBY.

    ``name`` is one of :data:`REDIS_COUNTERS`; ``client`` may be a pipeline, to
    ride along with the caller's other commands. Never raises for a Redis
    failure: a lost increment must not fail a gateway's poll.
    """
    field = counter_field(name, labels=labels)
    with contextlib.suppress(redis.RedisError):
        (client or redis_client()).hincrby(COUNTERS_KEY, field, amount)


def counter_field(name: str, *, labels: Mapping[str, str] | None = None) -> str:
    """The field of a shared counter in :data:`COUNTERS_KEY`: ``["<name>", {labels}]``
    (for callers that add to it from a script of their own, like the snapshot poll)."""
    if name not in REDIS_COUNTERS:
        raise ValueError(f"{name} is not a counter of limits.gateways.counters")
    return json.dumps([name, dict(sorted((labels or {}).items()))])
