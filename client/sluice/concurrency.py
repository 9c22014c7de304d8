"""Concurrency limits: statuses of in-flight slots, request ids, and the in-process fallback.

In Redis, each concurrency key is a sorted set of the requests in flight, scored
by the Redis time (ms) at which an entry expires if it is never released
(``hot.lua`` acquires, ``release.lua`` releases). A gateway that crashes leaves
its entries behind; they stop counting ``timeout`` seconds after they were
taken, so the cap heals by itself.

When Redis is unavailable and the route fails ``local``, :class:`LocalSlots`
counts in process with ``1/gateways`` of each cap (at least one), like
:class:`~.failure.LocalBuckets` does for buckets (``open``: the whole cap).

A call that failed after it was sent may still have run in Redis: its reply
was late or lost. Its request id may then sit in the in-flight sets although
the gateway decided without it. Such ids, and releases that failed, go to
:class:`Orphans`, and the limiter releases them in the background
(:class:`Releaser`, or the asyncio limiter's task) until Redis confirms.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from .decision import LimitStatus
from .plans import PolicyPlan

__all__ = [
    "SLOT_RETRY_AFTER",
    "LocalSlots",
    "Orphan",
    "Orphans",
    "Releaser",
    "RequestIds",
    "slot_statuses",
]

logger = logging.getLogger("sluice")

#: Seconds a client rejected by a concurrency limit is told to wait: a slot can
#: free at any moment, so the hint is short.
SLOT_RETRY_AFTER = 1.0


def slot_statuses(
    plan: PolicyPlan, keys: tuple[str, ...], reply: list[int], offset: int
) -> tuple[LimitStatus, ...]:
    """Statuses of the slots from ``reply[offset:]``: (fits, in flight after) per slot."""
    statuses = []
    for index, slot in enumerate(plan.slots):
        at = offset + 2 * index
        fits, count = reply[at] == 1, reply[at + 1]
        most = slot.limit.max_inflight
        statuses.append(
            LimitStatus(
                slot.limit,
                slot.name,
                keys[index],
                most,
                0,
                fits,
                max(0, most - count),
                0.0,
                0.0 if fits else SLOT_RETRY_AFTER,
            )
        )
    return tuple(statuses)


class RequestIds:
    """Unique ids for slot entries: a random prefix per process and a counter."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6) + ":"
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return self._prefix + str(next(self._counter))


class LocalSlots:
    """In-process slots for the ``local`` failure mode: ``1/gateways`` of each cap."""

    def __init__(self, *, gateways: int = 4) -> None:
        if gateways < 1:
            raise ValueError("gateways must be at least 1")
        self.gateways = gateways
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(
        self, plan: PolicyPlan, keys: tuple[str, ...], *, share: int | None = None
    ) -> list[int]:
        """Take a slot of every cap that has room; a reply in the script's slot shape.

        Returns ``[admitted, then per slot: fits, in flight after]``; nothing is
        taken unless every enforcing slot has room. ``share``: divide each cap
        by this instead of ``gateways`` (1: the whole cap, the ``open`` mode).
        """
        parts = self.gateways if share is None else share
        with self._lock:
            counts = [self._counts.get(key, 0) for key in keys]
            room = [
                count < max(1, slot.limit.max_inflight // parts)
                for count, slot in zip(counts, plan.slots, strict=True)
            ]
            admitted = all(
                ok
                for ok, slot in zip(room, plan.slots, strict=True)
                if not slot.limit.shadow
            )
            reply = [int(admitted)]
            for key, count, ok in zip(keys, counts, room, strict=True):
                if admitted and ok:
                    count = self._counts[key] = count + 1
                reply += [int(ok), count]
            return reply

    def release(self, keys: tuple[str, ...]) -> None:
        with self._lock:
            for key in keys:
                count = self._counts.get(key, 0) - 1
                if count > 0:
                    self._counts[key] = count
                else:
                    self._counts.pop(key, None)

    def share(self, most: int) -> int:
        """This gateway's part of a cap of ``most``: never below one request."""
        return max(1, most // self.gateways)


class Orphan(NamedTuple):
    """A request id that may hold slots in Redis that no request will release."""

    keys: tuple[str, ...]  #: the in-flight sets it may have joined
    member: str  #: its request id


class Orphans:
    """Request ids to release in the background; thread-safe; ``clock`` in seconds.

    Each is released until a release removes it, or until two releases
    ``settle`` seconds apart both find nothing there: a call whose reply was
    merely late has run before the first, and one Redis had not run when its
    client gave up is not run afterwards (the client's connection was closed),
    so the second release only covers a call still in flight somewhere. A
    failed release is tried again after ``retry`` seconds, doubling to
    ``max_retry`` while Redis fails. At most ``max_entries`` are kept (the
    oldest dropped: its slots expire after their timeout anyway).
    """

    def __init__(
        self,
        *,
        settle: float = 1.0,
        retry: float = 0.1,
        max_retry: float = 2.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settle, self.retry, self.max_retry = settle, retry, max_retry
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        #: orphan -> (next attempt, releases that found nothing, current retry wait)
        self._due: dict[Orphan, tuple[float, int, float]] = {}
        self.added = 0  #: request ids queued so far
        self.released = 0  #: entries a background release was seen to remove

    def __len__(self) -> int:
        return len(self._due)

    def add(self, keys: tuple[str, ...], member: str) -> None:
        """Release ``member`` from ``keys`` as soon as possible."""
        with self._lock:
            self.added += 1
            self._due[Orphan(keys, member)] = (self._clock(), 0, self.retry)
            while len(self._due) > self.max_entries:
                del self._due[next(iter(self._due))]

    def due(self) -> list[Orphan]:
        """The orphans whose next release is due now."""
        now = self._clock()
        with self._lock:
            return [o for o, (at, _, _) in self._due.items() if at <= now]

    def next_in(self) -> float | None:
        """Seconds until the next release is due (0.0: now); None when there is none."""
        with self._lock:
            if not self._due:
                return None
            return max(0.0, min(at for at, _, _ in self._due.values()) - self._clock())

    def done(self, orphan: Orphan, removed: int) -> None:
        """A release of ``orphan`` answered: ``removed`` entries went."""
        with self._lock:
            state = self._due.get(orphan)
            if state is None:
                return
            self.released += removed
            if removed or state[1] >= 1:
                del self._due[orphan]
            else:
                self._due[orphan] = (self._clock() + self.settle, 1, self.retry)

    def failed(self, orphan: Orphan) -> None:
        """A release of ``orphan`` failed (Redis did not answer): try again later."""
        with self._lock:
            state = self._due.get(orphan)
            if state is not None:
                wait = state[2]
                self._due[orphan] = (
                    self._clock() + wait,
                    state[1],
                    min(self.max_retry, 2 * wait),
                )


class Releaser:
    """The daemon thread that releases a sync limiter's orphans (started on demand).

    ``release(keys, member)`` runs ``release.lua`` and returns how many entries
    it removed; any exception counts as a failed attempt.
    """

    def __init__(
        self, orphans: Orphans, release: Callable[[tuple[str, ...], str], int]
    ) -> None:
        self.orphans, self._release = orphans, release
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, keys: tuple[str, ...], member: str) -> None:
        """Queue ``member`` for release and make sure the thread runs (after a fork too)."""
        self.orphans.add(keys, member)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sluice-releaser", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            wait = self.orphans.next_in()
            self._wake.wait(60.0 if wait is None else wait)
            self._wake.clear()
            release_due(self.orphans, self._release)


def release_due(
    orphans: Orphans, release: Callable[[tuple[str, ...], str], int]
) -> None:
    """Try each orphan that is due once; at the first failure (Redis is down),
    put off the rest too."""
    due = orphans.due()
    for index, orphan in enumerate(due):
        try:
            removed = release(orphan.keys, orphan.member)
        except Exception as exc:  # the releaser must outlive any error
            for later in due[index:]:
                orphans.failed(later)
            logger.debug("limiter.orphan_release_failed: %s", exc)
            return
        orphans.done(orphan, int(removed))
