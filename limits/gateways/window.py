"""What this web process heard from Redis about polls lately, and the reports it owes it.

Most polls hold the current ETag (a 304) with a token this process vouched for a
moment ago. They are answered from the window: what this process heard from
Redis less than ``SLUICE_POLL_WINDOW_MS`` ago (default 1 s). Their reports and
counts are kept here and written with the others of the window in one pipeline
(:func:`poll_window_flush`), which also checks that every token used in the window
is still valid and reads the ETag again. ``limits.gateways.polling`` explains
the two paths; a publish, a revocation or the fleet page resets or flushes the
window of their own process at once.

When Redis does not answer, the window is opened from Postgres instead
(``limits.gateways.polling``): reports and counts stay buffered, a flush that
fails puts them back, and the first flush after Redis returns writes them.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Max

from limits.core.store import redis_client
from limits.gateways.counters import SNAPSHOT_POLLS, counter_field
from limits.gateways.keys import BUNDLE_KEY, COUNTERS_KEY, FLEET_KEY
from limits.gateways.reports import GatewayReport, report_json
from limits.models import Snapshot

__all__ = [
    "Window",
    "poll_field",
    "poll_redis_timeout",
    "poll_window",
    "poll_window_flush",
    "poll_window_is_open",
    "poll_window_reset",
    "version_published",
]


def poll_redis_timeout() -> float:
    """Seconds a poll waits for the control plane's Redis before it is answered
    without it (and without redis-py's retries): ``SLUICE_POLL_REDIS_TIMEOUT_MS``,
    250 ms by default, well within a gateway's own poll timeout of 2 s."""
    return settings.SLUICE_POLL_REDIS_TIMEOUT_MS / 1000


def poll_field(result: str) -> str:
    """The field of the shared poll counter (``limits.gateways.counters``) for one result."""
    return counter_field(SNAPSHOT_POLLS, labels={"result": result})


@dataclass
class Window:
    """What this process heard from Redis at ``opened`` and what it owes it since."""

    pid: int = field(default_factory=os.getpid)
    opened: float = float("-inf")  #: monotonic time of the last round trip
    etag: str | None = None
    tokens: set[str] = field(default_factory=set)  #: cache keys of vouched tokens
    #: gateway -> its latest report (serialized at the flush, once per gateway)
    reports: dict[str, GatewayReport] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)  #: answered, by result
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: opened from Postgres because Redis did not answer (what the window says
    #: comes from there; the next slow poll tries Redis again)
    without_redis: bool = False
    #: the highest version known to be published (what reports may name)
    published: int = 0


_window = Window()


def poll_window() -> Window:
    """This process's window (a new one after a fork: a child starts having heard nothing)."""
    global _window
    if _window.pid != os.getpid():  # forked after import: start empty
        _window = Window()
    return _window


def poll_window_is_open(window: Window) -> bool:
    """Whether ``window`` heard from Redis less than ``SLUICE_POLL_WINDOW_MS`` ago
    (from Postgres, when Redis failed: at least a second, so that Redis is tried
    once a second per process, not on every poll)."""
    length = settings.SLUICE_POLL_WINDOW_MS / 1000
    if window.without_redis:
        length = max(length, 1.0)
    return time.monotonic() - window.opened < length


def poll_window_flush(*, etag: str | None = None) -> None:
    """Write the buffered reports and poll count, re-check the window's tokens, and
    open a new window (with ``etag`` when the caller just read it).

    If Redis fails, what was buffered goes back into the window (a report that
    came meanwhile wins) and the error is raised.
    """
    window = poll_window()
    with window.lock:
        reports, polls, tokens = window.reports, window.polls, sorted(window.tokens)
        window.reports, window.polls = {}, {}
    try:
        replies = _write(reports, polls, tokens)
    except redis.RedisError:
        with window.lock:
            window.reports = {**reports, **window.reports}
            for result, count in polls.items():
                window.polls[result] = window.polls.get(result, 0) + count
        raise
    stored, valid = replies[0], replies[1:]
    with window.lock:
        window.tokens -= {t for t, ok in zip(tokens, valid, strict=True) if not ok}
        window.etag = (
            etag if etag is not None else (stored.decode() if stored else None)
        )
        window.opened = time.monotonic()
        window.without_redis = False


def _write(
    reports: dict[str, GatewayReport], polls: dict[str, int], tokens: list[str]
) -> list:
    """One pipeline: reports, counts, then the ETag and whether each token is valid."""
    pipe = redis_client(timeout=poll_redis_timeout()).pipeline(transaction=False)
    if reports:
        pipe.hset(FLEET_KEY, mapping={g: report_json(r) for g, r in reports.items()})
    for result, count in polls.items():
        pipe.hincrby(COUNTERS_KEY, poll_field(result), count)
    pipe.hget(BUNDLE_KEY, "etag")
    for token in tokens:
        pipe.exists(token)
    return pipe.execute()[-1 - len(tokens) :]


def poll_window_reset(*, drop_reports: bool = False) -> None:
    """Forget what this process heard (after a publish or a revocation here);
    buffered reports are kept for the next flush unless ``drop_reports``."""
    window = poll_window()
    with window.lock:
        window.opened = float("-inf")
        window.etag = None
        window.tokens.clear()
        window.published = 0
        if drop_reports:
            window.reports, window.polls = {}, {}


def poll_window_saw_version(version: int) -> None:
    """Remember that ``version`` is published (the highest a bundle served here was built
    from), so reports naming it are checked without a query."""
    window = poll_window()
    with window.lock:
        window.published = max(window.published, version)


def version_published(version: int) -> bool:
    """Whether ``version`` is at most the latest published version.

    Asks Postgres only for a version above the highest this process has seen in a
    bundle it served or a query (a version published since, or a report that is
    wrong), so the polls of a fleet in sync query nothing. Without Postgres the
    version is believed.
    """
    window = poll_window()
    if version <= window.published:
        return True
    try:
        latest = Snapshot.objects.aggregate(latest=Max("version"))["latest"] or 0
    except DatabaseError:
        return True
    with window.lock:
        window.published = max(window.published, latest)
    return version <= latest
