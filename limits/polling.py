"""A gateway's poll for its snapshot: authenticate, record its report, compare ETags.

This is the hottest path of the control plane (every gateway, every few
seconds, mostly answered 304), so it is one Redis round trip and no database
query: a Lua script checks the token's cache entry, stores the gateway's
report in the fleet hash, counts the poll, and returns the bundle's ETag.
Only a token missing from the cache (first use, or after five minutes) is
checked in Postgres.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import redis

from limits.bundle import BUNDLE_KEY
from limits.fleet import FLEET_KEY, GatewayReport, report_json
from limits.metrics import COUNTERS_KEY, SNAPSHOT_POLLS, counter_field, metric_increment
from limits.models import GatewayToken, hash_secret
from limits.store import redis_client
from limits.tokens import GATEWAY_TOKEN_KEY, gateway_token_authenticate

__all__ = ["PollOutcome", "gateway_poll"]

#: The counter fields the script adds to: polls answered 304, and 200.
_POLL_FIELDS = tuple(
    counter_field(SNAPSHOT_POLLS, labels={"result": result})
    for result in ("304", "200")
)

# KEYS: token cache entry, fleet hash, bundle hash, shared metric counters
# ARGV: gateway id, report JSON, the ETag the gateway holds, counter field of a 304,
#       counter field of a 200
# Returns {0} for an unknown token, else {1, etag or false}.
_POLL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local etag = redis.call('HGET', KEYS[3], 'etag')
local counted = (etag and etag == ARGV[3]) and ARGV[4] or ARGV[5]
redis.call('HINCRBY', KEYS[4], counted, 1)
return {1, etag}
"""


@dataclass(frozen=True, slots=True)
class PollOutcome:
    authorized: bool
    etag: str | None  #: the current bundle's ETag; None when Redis has no bundle


@functools.lru_cache(maxsize=4)
def _script(client: redis.Redis):
    return client.register_script(_POLL)  # EVALSHA, loaded again after a Redis restart


def gateway_poll(
    *, secret: str, report: GatewayReport, held_etag: str = ""
) -> PollOutcome:
    """Authenticate a poll with gateway token ``secret``, record ``report``, count it.

    ``held_etag`` is the ETag the gateway sent: the poll counts as a 304 when it is
    the current one. ``report.token`` is filled in here: the visible prefix of the secret.
    """
    report = report.with_token(secret[: len(GatewayToken.PREFIX) + 8])
    keys = [
        GATEWAY_TOKEN_KEY.format(hash_secret(secret)),
        FLEET_KEY,
        BUNDLE_KEY,
        COUNTERS_KEY,
    ]
    args = [report.gateway, report_json(report), held_etag, *_POLL_FIELDS]
    script = _script(redis_client())
    found, *rest = script(keys=keys, args=args)
    if not found:
        if gateway_token_authenticate(secret) is None:  # not cached yet, or not valid
            metric_increment(SNAPSHOT_POLLS, labels={"result": "401"})
            return PollOutcome(False, None)
        found, *rest = script(keys=keys, args=args)
    etag = rest[0] if found and rest and rest[0] else None
    return PollOutcome(bool(found), etag.decode() if etag else None)
