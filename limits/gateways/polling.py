"""A gateway's poll for its snapshot: authenticate, record its report, compare ETags.

This is the hottest path of the control plane (every gateway, every few
seconds, mostly answered 304) and never queries the database once a token is
known. Two paths:

* **slow** (a token this process has not vouched for lately, or a stale
  window): one Lua script on Redis checks the token's cache entry, stores the
  gateway's report in the fleet hash, counts the poll and returns the bundle's
  ETag. A token missing from the cache (first use, or after five minutes) is
  checked in Postgres.
* **fast** (a vouched token holding the current ETag, the 304s that make up
  nearly all polls, or holding none): answered from what this process heard from Redis
  less than ``SLUICE_POLL_WINDOW_MS`` ago (default 1 s). The report is kept in
  memory and written with the others of the window in one pipeline, which also
  checks that every token used in the window is still valid and reads the ETag
  again. So a web process makes about one Redis round trip per second instead
  of one per poll (``docs/benchmarks.md``: the round trip was most of a 304).

What the window delays, by at most its length in other processes (this
process resets it at once): a new bundle's ETag after a publish, a revocation,
and a report reaching the fleet page. ``SLUICE_POLL_WINDOW_MS=0`` makes every
poll take the slow path.

**Without Redis** (paused, down, or slower than ``SLUICE_POLL_REDIS_TIMEOUT_MS``): the
slow path answers from Postgres instead (the token checked there, the bundle
built from the published versions, :func:`.bundle.snapshot_bundle_from_postgres`)
and opens the window on that for at least a second, so Redis is tried about
once a second per process and the other polls cost what they cost with Redis.
Reports and counts stay buffered in the window and are written when Redis
answers again. Only when Postgres fails as well, and this process has never
vouched for the token or heard of a bundle, does a poll fail: with
:class:`PollUnavailable` (the API's 503 with ``Retry-After``).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Collection
from dataclasses import dataclass

import redis
from django.db import DatabaseError

from limits.core.store import redis_client
from limits.gateways.bundle import Bundle, etag_held, snapshot_bundle_from_postgres
from limits.gateways.counters import SNAPSHOT_POLLS, metric_increment
from limits.gateways.keys import BUNDLE_KEY, COUNTERS_KEY, FLEET_KEY, gateway_token_key
from limits.gateways.reports import GatewayReport, report_json
from limits.gateways.tokens import gateway_token_authenticate
from limits.gateways.window import (
    Window,
    poll_field,
    poll_redis_timeout,
    poll_window,
    poll_window_flush,
    poll_window_is_open,
)
from limits.models import GatewayToken, hash_secret

__all__ = ["PollOutcome", "PollUnavailable", "gateway_poll"]


# KEYS: token cache entry, fleet hash, bundle hash, shared metric counters
# ARGV: gateway id, report JSON, counter field of a 304, counter field of a 200,
#       then the ETags the gateway holds (etag_held: equal, or "*")
# Returns {0} for an unknown token, else {1, etag or false}.
_POLL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local etag = redis.call('HGET', KEYS[3], 'etag')
local counted = ARGV[4]
if etag then
  for i = 5, #ARGV do
    if ARGV[i] == etag or ARGV[i] == '*' then counted = ARGV[3] break end
  end
end
redis.call('HINCRBY', KEYS[4], counted, 1)
return {1, etag}
"""


@dataclass(frozen=True, slots=True)
class PollOutcome:
    authorized: bool
    etag: str | None  #: the current bundle's ETag; None when Redis has no bundle
    #: the bundle itself, when it was built from Postgres (Redis did not answer)
    bundle: Bundle | None = None


class PollUnavailable(Exception):
    """Neither Redis nor Postgres answered, and this process knows nothing to say."""


@functools.lru_cache(maxsize=4)
def _script(client: redis.Redis):
    return client.register_script(_POLL)  # EVALSHA, loaded again after a Redis restart


def gateway_poll(
    *, secret: str, report: GatewayReport, held: Collection[str] = ()
) -> PollOutcome:
    """Authenticate a poll with gateway token ``secret`` and record ``report``.

    ``held``: the ETags the gateway sent in ``If-None-Match``, weak prefixes
    removed (:func:`.bundle.etag_held`). A poll that holds the window's ETag (a
    304), or none at all (a gateway starting: any bundle is newer than nothing),
    is answered from memory; any other goes to Redis, so a gateway is never
    handed an older bundle than the one it has.
    ``report.token`` is filled in here: the prefix of the secret.
    """
    report = report.with_token(secret[: len(GatewayToken.PREFIX) + 8])
    key = gateway_token_key(hash_secret(secret))
    window = poll_window()
    with window.lock:
        if (
            poll_window_is_open(window)
            and key in window.tokens
            and window.etag
            and (not held or etag_held(held, window.etag))
        ):
            window.reports[report.gateway] = report
            result = "304" if held else "200"
            window.polls[result] = window.polls.get(result, 0) + 1
            return PollOutcome(True, window.etag)
    try:
        outcome = _poll_redis(key, secret, report, held)
    except redis.RedisError:
        return _poll_without_redis(window, key, secret, report, held)
    except DatabaseError:  # a token Redis does not vouch for, and Postgres is down
        return _from_memory(window, key, report, held)
    if outcome.authorized:
        with window.lock:
            window.tokens.add(key)
        if not poll_window_is_open(window):
            with contextlib.suppress(redis.RedisError):  # reports stay buffered
                poll_window_flush(etag=outcome.etag)
    return outcome


def _poll_redis(
    key: str, secret: str, report: GatewayReport, held: Collection[str]
) -> PollOutcome:
    """The slow path: one script call (and Postgres for a token not cached in Redis)."""
    keys = [key, FLEET_KEY, BUNDLE_KEY, COUNTERS_KEY]
    args = [
        report.gateway,
        report_json(report),
        poll_field("304"),
        poll_field("200"),
        *sorted(held),
    ]
    script = _script(redis_client(timeout=poll_redis_timeout()))
    found, *rest = script(keys=keys, args=args)
    if not found:
        if gateway_token_authenticate(secret) is None:  # not cached yet, or not valid
            metric_increment(SNAPSHOT_POLLS, labels={"result": "401"})
            return PollOutcome(False, None)
        found, *rest = script(keys=keys, args=args)
    etag = rest[0] if found and rest and rest[0] else None
    return PollOutcome(bool(found), etag.decode() if etag else None)


def _poll_without_redis(
    window: Window,
    key: str,
    secret: str,
    report: GatewayReport,
    held: Collection[str],
) -> PollOutcome:
    """The slow path while Redis fails: Postgres, else what this process knows."""
    try:
        valid = key in window.tokens or _token_valid(secret)
        bundle = snapshot_bundle_from_postgres() if valid else None
    except DatabaseError:
        return _from_memory(window, key, report, held)
    if not valid:
        return PollOutcome(False, None)
    etag = bundle.etag if bundle is not None else None
    _reopen(window, key, report, etag, held)
    return PollOutcome(True, etag, bundle)


def _from_memory(
    window: Window, key: str, report: GatewayReport, held: Collection[str]
) -> PollOutcome:
    """Postgres failed too: a token and a bundle this process knows, or nothing."""
    with window.lock:
        known, etag = key in window.tokens, window.etag
    if not known or etag is None:
        raise PollUnavailable("neither Redis nor Postgres answered")
    _reopen(window, key, report, etag, held)
    return PollOutcome(True, etag)


def _reopen(
    window: Window,
    key: str,
    report: GatewayReport,
    etag: str | None,
    held: Collection[str],
) -> None:
    """Open the window on what was found without Redis; buffer the report and count."""
    with window.lock:
        window.tokens.add(key)
        window.etag = etag
        window.opened = time.monotonic()
        window.without_redis = True
        window.reports[report.gateway] = report
        result = "304" if etag is not None and etag_held(held, etag) else "200"
        window.polls[result] = window.polls.get(result, 0) + 1


def _token_valid(secret: str) -> bool:
    """Whether the gateway token is active, asking Postgres alone (no cache entry)."""
    return GatewayToken.objects.filter(
        key_hash=hash_secret(secret), revoked_at__isnull=True
    ).exists()
