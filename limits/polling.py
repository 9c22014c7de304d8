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
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import redis
from django.conf import settings

from limits.bundle import BUNDLE_KEY
from limits.core.store import redis_client
from limits.fleet import FLEET_KEY, GatewayReport, report_json
from limits.metrics import COUNTERS_KEY, SNAPSHOT_POLLS, counter_field, metric_increment
from limits.models import GatewayToken, hash_secret
from limits.tokens import GATEWAY_TOKEN_KEY, gateway_token_authenticate

__all__ = [
    "PollOutcome",
    "gateway_poll",
    "poll_window_flush",
    "poll_window_reset",
]


def _poll_field(result: str) -> str:
    """The field of the shared poll counter (``limits.metrics``) for one result."""
    return counter_field(SNAPSHOT_POLLS, labels={"result": result})


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


@dataclass
class _Window:
    """What this process heard from Redis at ``opened`` and what it owes it since."""

    pid: int = field(default_factory=os.getpid)
    opened: float = float("-inf")  #: monotonic time of the last round trip
    etag: str | None = None
    tokens: set[str] = field(default_factory=set)  #: cache keys of vouched tokens
    #: gateway -> its latest report (serialized at the flush, once per gateway)
    reports: dict[str, GatewayReport] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)  #: answered, by result
    lock: threading.Lock = field(default_factory=threading.Lock)


_window = _Window()


def _current() -> _Window:
    global _window
    if _window.pid != os.getpid():  # forked after import: start empty
        _window = _Window()
    return _window


@functools.lru_cache(maxsize=4)
def _script(client: redis.Redis):
    return client.register_script(_POLL)  # EVALSHA, loaded again after a Redis restart


def gateway_poll(
    *, secret: str, report: GatewayReport, held: Collection[str] = ()
) -> PollOutcome:
    """Authenticate a poll with gateway token ``secret`` and record ``report``.

    ``held``: the ETags the gateway sent in ``If-None-Match``. A poll that holds
    the window's ETag (a 304), or none at all (a gateway starting: any bundle
    is newer than nothing), is answered from memory; any other goes to Redis,
    so a gateway is never handed an older bundle than the one it has.
    ``report.token`` is filled in here: the prefix of the secret.
    """
    report = report.with_token(secret[: len(GatewayToken.PREFIX) + 8])
    key = GATEWAY_TOKEN_KEY.format(hash_secret(secret))
    window = _current()
    with window.lock:
        fresh = not held or window.etag in held
        if fresh and _open(window) and key in window.tokens and window.etag:
            window.reports[report.gateway] = report
            result = "304" if held else "200"
            window.polls[result] = window.polls.get(result, 0) + 1
            return PollOutcome(True, window.etag)
    outcome = _poll_redis(key, secret, report, held)
    if outcome.authorized:
        with window.lock:
            window.tokens.add(key)
        if not _open(window):
            poll_window_flush(etag=outcome.etag)
    return outcome


def _open(window: _Window) -> bool:
    return time.monotonic() - window.opened < settings.SLUICE_POLL_WINDOW_MS / 1000


def _poll_redis(
    key: str, secret: str, report: GatewayReport, held: Collection[str]
) -> PollOutcome:
    """The slow path: one script call (and Postgres for a token not cached in Redis)."""
    keys = [key, FLEET_KEY, BUNDLE_KEY, COUNTERS_KEY]
    held_etag = next(iter(held)) if len(held) == 1 else ""
    args = [
        report.gateway,
        report_json(report),
        held_etag,
        _poll_field("304"),
        _poll_field("200"),
    ]
    script = _script(redis_client())
    found, *rest = script(keys=keys, args=args)
    if not found:
        if gateway_token_authenticate(secret) is None:  # not cached yet, or not valid
            metric_increment(SNAPSHOT_POLLS, labels={"result": "401"})
            return PollOutcome(False, None)
        found, *rest = script(keys=keys, args=args)
    etag = rest[0] if found and rest and rest[0] else None
    return PollOutcome(bool(found), etag.decode() if etag else None)


def poll_window_flush(*, etag: str | None = None) -> None:
    """Write the buffered reports and poll count, re-check the window's tokens, and
    open a new window (with ``etag`` when the caller just read it)."""
    window = _current()
    with window.lock:
        reports, polls, tokens = window.reports, window.polls, sorted(window.tokens)
        window.reports, window.polls = {}, {}
    pipe = redis_client().pipeline(transaction=False)
    if reports:
        pipe.hset(FLEET_KEY, mapping={g: report_json(r) for g, r in reports.items()})
    for result, count in polls.items():
        pipe.hincrby(COUNTERS_KEY, _poll_field(result), count)
    pipe.hget(BUNDLE_KEY, "etag")
    for token in tokens:
        pipe.exists(token)
    replies = pipe.execute()[-1 - len(tokens) :]
    stored, valid = replies[0], replies[1:]
    with window.lock:
        window.tokens -= {t for t, ok in zip(tokens, valid, strict=True) if not ok}
        window.etag = (
            etag if etag is not None else (stored.decode() if stored else None)
        )
        window.opened = time.monotonic()


def poll_window_reset(*, drop_reports: bool = False) -> None:
    """Forget what this process heard (after a publish or a revocation here);
    buffered reports are kept for the next flush unless ``drop_reports``."""
    window = _current()
    with window.lock:
        window.opened = float("-inf")
        window.etag = None
        window.tokens.clear()
        if drop_reports:
            window.reports, window.polls = {}, {}
