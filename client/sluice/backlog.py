"""What a limiter owes Redis after it decided without it: slots to release, tokens to charge.

Two debts come out of a failed or timed-out call, and both are settled in the
background once Redis answers (the sync limiter's :class:`Backlog` thread, the
asyncio limiter's task), never on the request path:

- **Orphans**: a call that failed after it was sent may still have run in
  Redis (its reply was late or lost), so its request id may sit in the
  in-flight sets although the gateway decided without it; a release that
  failed leaves its id there too. :class:`Orphans` keeps them until a release
  confirms.
- **Charges**: what the ``open`` mode admitted through its local buckets is
  charged to the Redis buckets afterwards (:class:`Charges`, ``charge.lua``).
  Redis refilled and granted those tokens to others meanwhile, so without
  this a gateway whose calls keep timing out (a loaded Redis, not a dead one)
  would grant every refilled token twice. A charge puts the bucket into debt
  by what was admitted, at most one more burst beyond empty: the fleet pays
  back its over-admission by rejecting a little longer, and a long outage
  does not block a tenant for longer than one burst's refill.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "Backlog",
    "Charge",
    "Charges",
    "Orphan",
    "Orphans",
    "charge_due",
    "release_due",
]

logger = logging.getLogger("sluice")


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


class Charge(NamedTuple):
    """Tokens to charge to the buckets of one decision's keys (one hash tag)."""

    keys: tuple[str, ...]
    amounts: tuple[int, ...]  #: µs of refill admitted locally, per key
    capacities: tuple[int, ...]  #: µs of a full bucket, per key


class Charges:
    """What the ``open`` mode admitted locally, owed to Redis; thread-safe.

    Amounts for the same keys add up. A failed charge is tried again after
    ``retry`` seconds, doubling to ``max_retry``. At most ``max_entries`` key
    sets are kept (then the oldest are dropped: their over-admission is not
    paid back).
    """

    def __init__(
        self,
        *,
        retry: float = 0.1,
        max_retry: float = 2.0,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.retry, self.max_retry, self.max_entries = retry, max_retry, max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._owed: dict[tuple[str, ...], Charge] = {}
        self._next, self._wait = 0.0, retry
        self.pending = False  #: anything owed (read without the lock on the hot path)
        self.charged = 0  #: charges Redis took so far

    def __len__(self) -> int:
        return len(self._owed)

    def add(
        self,
        keys: tuple[str, ...],
        amounts: tuple[int, ...],
        capacities: tuple[int, ...],
    ) -> None:
        """Owe ``amounts`` (µs, per key) to the buckets ``keys``."""
        with self._lock:
            before = self._owed.pop(keys, None)
            if before is not None:
                amounts = tuple(
                    a + b for a, b in zip(amounts, before.amounts, strict=True)
                )
            self._owed[keys] = Charge(keys, amounts, capacities)
            while len(self._owed) > self.max_entries:
                del self._owed[next(iter(self._owed))]
            self.pending = True

    def next_in(self) -> float | None:
        """Seconds until charging is due (0.0: now); None when nothing is owed."""
        with self._lock:
            if not self._owed:
                return None
            return max(0.0, self._next - self._clock())

    def take(self) -> list[Charge]:
        """Everything owed, if charging is due now (it is no longer owed: put back what fails)."""
        with self._lock:
            if not self._owed or self._clock() < self._next:
                return []
            taken, self._owed, self.pending = list(self._owed.values()), {}, False
            return taken

    def done(self) -> None:
        """Charges went through: the next ones are due at once."""
        with self._lock:
            self._next, self._wait = 0.0, self.retry
            self.charged += 1

    def failed(self, left: list[Charge]) -> None:
        """Redis did not take ``left``: owed again, tried after the retry wait."""
        for charge in left:
            self.add(charge.keys, charge.amounts, charge.capacities)
        with self._lock:
            self._next = self._clock() + self._wait
            self._wait = min(self.max_retry, 2 * self._wait)


def release_due(
    orphans: Orphans, release: Callable[[tuple[str, ...], str], int]
) -> None:
    """Try each orphan that is due once; at the first failure (Redis is down),
    put off the rest too."""
    due = orphans.due()
    for index, orphan in enumerate(due):
        try:
            removed = release(orphan.keys, orphan.member)
        except Exception as exc:  # the backlog must outlive any error
            for later in due[index:]:
                orphans.failed(later)
            logger.debug("limiter.orphan_release_failed: %s", exc)
            return
        orphans.done(orphan, int(removed))


def charge_due(charges: Charges, charge: Callable[[Charge], object]) -> None:
    """Send what is owed, one call per key set; at the first failure, keep the rest."""
    taken = charges.take()
    for index, owed in enumerate(taken):
        try:
            charge(owed)
        except Exception as exc:  # the backlog must outlive any error
            charges.failed(taken[index:])
            logger.debug("limiter.charge_failed: %s", exc)
            return
        charges.done()


class Backlog:
    """The daemon thread that settles a sync limiter's orphans and charges (started on demand).

    ``release(keys, member)`` runs ``release.lua`` and returns how many
    entries it removed; ``charge(owed)`` runs ``charge.lua``. Any exception
    counts as a failed attempt.
    """

    def __init__(
        self,
        orphans: Orphans,
        charges: Charges,
        *,
        release: Callable[[tuple[str, ...], str], int],
        charge: Callable[[Charge], object],
    ) -> None:
        self.orphans, self.charges = orphans, charges
        self._release, self._charge = release, charge
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def wake(self) -> None:
        """Make sure the thread runs (after a fork too) and looks at its work now."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sluice-backlog", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            waits = [
                w
                for w in (self.orphans.next_in(), self.charges.next_in())
                if w is not None
            ]
            self._wake.wait(min(waits, default=60.0))
            self._wake.clear()
            release_due(self.orphans, self._release)
            charge_due(self.charges, self._charge)
