"""In-process helpers for hot keys: the cache of rejected buckets, and leased tokens.

Both only ever hold what Redis said; neither invents tokens:

- :class:`RejectCache` remembers, for a bucket that rejected a request, when
  that request would fit and what it cost. Until then a request on the bucket
  that costs at least as much is rejected without a Redis call: time only
  frees room and other gateways can only take it, so it would not fit in Redis
  either. An abusive client is then rejected locally until its retry-after.
  A cheaper request is asked of Redis: once a sliding window or a quota is
  full, the state a rejection replies depends on the request's cost (``wait +
  (limit - cost) x tick``), so it says nothing of when a cheaper one fits.
- :class:`Leases` holds tokens a gateway took from a bucket in one call (the
  ``hot.lua`` script charged them in Redis) and spends them in process until
  they run out or their lease time ends. Unspent tokens are lost, never given
  back: a lease can make the fleet admit early, never admit more than Redis
  granted (the bound is in ``docs/enforcement.md``).

Times are integer microseconds of a local monotonic clock; whether a request fits
is the limit's kind's rule (:class:`.kinds.Shape`), so only durations are
compared with Redis time.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plans import PolicyPlan

__all__ = ["PAID", "REFILL", "SINGLE", "Leases", "RejectCache"]

PAID, REFILL, SINGLE = 0, 1, 2  #: what :meth:`Leases.take` asks of a request


class RejectCache:
    """Buckets known to reject until a moment, learned from rejections (``max_keys`` 0: off).

    Besides the buckets that rejected, it keeps what every reply said of each
    bucket, and what a rejection said of the concurrency slots, so that an
    answer from the cache shows the last known state of every limit
    (:func:`.hot.cached_rejection`), and so that a failover starts its local
    buckets from Redis's last word (:meth:`owed`).
    """

    def __init__(self, *, max_keys: int = 100_000) -> None:
        self.max_keys = max_keys
        #: bucket key -> (when the request it rejected fits, µs; that request's
        #: charge: the state it adds, its cost in the key's units)
        self.entries: dict[str, tuple[int, int]] = {}
        self.seen: dict[str, int] = {}  #: bucket key -> its TAT at the last reply, µs
        self.inflight: dict[str, int] = {}  #: slot key -> requests in flight then
        self.hits = 0  #: requests rejected from the cache, without Redis

    def remember(
        self,
        plan: PolicyPlan,
        keys: list[str],
        reply: list[int],
        now: int,
        step: int = 2,
    ) -> None:
        """Note what a Redis ``reply`` said (``step`` values per bucket): every
        bucket's debt and, for a rejection, when the request fits each enforcing
        bucket that it did not fit, and its charge there; a bucket that this
        request fit is forgotten as rejecting (its state moved on: the next
        costlier request asks Redis, whose wait is then exact). Called for every
        reply: the failure modes start from the debt Redis last reported, so they
        never grant again a token Redis granted."""
        if not self.max_keys:
            return
        seen, entries = self.seen, self.entries
        if len(seen) >= 2 * self.max_keys or len(entries) >= self.max_keys:
            self.clear()  # many keys, or many abusers at once: start afresh
        for index, key in enumerate(keys):
            at = step * index + 1
            seen[key] = now + reply[at + 1]
            if entries and reply[at] == 1:
                entries.pop(key, None)
        if reply[0] == 1:
            return
        for index, limit_plan in enumerate(plan.limits):
            at = step * index + 1
            if reply[at] != 1 and not limit_plan.limit.shadow:
                shape = limit_plan.shape
                entries[keys[index]] = (
                    now + shape.wait(reply[at + 1]),
                    shape.charged(0),
                )

    def remember_slots(
        self, keys: tuple[str, ...], reply: list[int], offset: int
    ) -> None:
        """Note the requests in flight the reply reported per slot (``reply[offset:]``)."""
        if self.max_keys:
            for index, key in enumerate(keys):
                self.inflight[key] = reply[offset + 2 * index + 1]

    def check(self, plan: PolicyPlan, keys: list[str], now: int) -> list[int] | None:
        """A rejecting reply in the token-bucket script's shape, or None: ask Redis.

        A bucket rejects when it rejected a request at least as costly (``plan``
        is compiled for this request's cost) that does not fit yet; its state is
        then the one where this request waits as long as that one: a lower
        bound of the wait, as Redis would have said it. Any other bucket's is
        its last known state, paid down by the time since; a bucket the cache
        knows nothing of is reported with a debt of -1.
        """
        entries, seen, debts, reject = self.entries, self.seen, [], False
        for index, limit_plan in enumerate(plan.limits):
            key = keys[index]
            tat = seen.get(key)
            debt = -1 if tat is None else max(0, tat - now)
            entry = entries.get(key)
            if entry is not None:
                fits_at, charge = entry
                shape = limit_plan.shape
                if fits_at <= now:
                    entries.pop(key, None)
                elif not limit_plan.limit.shadow and shape.charged(0) >= charge:
                    reject = True
                    debt = shape.waiting(fits_at - now)
            debts.append(debt)
        if not reject:
            return None
        self.hits += 1
        reply = [0]
        for debt, limit_plan in zip(debts, plan.limits, strict=True):
            reply += [int(limit_plan.shape.fits(debt)), debt]
        return reply

    def owed(self, keys: list[str], now: int) -> list[int]:
        """µs of debt Redis last reported for each of ``keys``, paid down since (0: unknown)."""
        seen = self.seen
        return [max(0, seen.get(key, now) - now) for key in keys]

    def clear(self) -> None:
        self.entries.clear()
        self.seen.clear()
        self.inflight.clear()


class _Pool:
    __slots__ = ("at", "balance", "debt", "expires", "refilling")

    def __init__(self) -> None:
        self.balance = 0  #: µs of refill time leased and not yet spent
        self.expires = 0  #: when the unspent balance is dropped
        self.debt = 0  #: the bucket's debt in Redis after the lease, µs
        self.at = 0  #: when that debt was read
        self.refilling = False  #: a request is taking a new lease for this key


class Leases:
    """Leased tokens per bucket key, spent in process; thread-safe.

    A gateway process holds at most one lease per key: while one request takes
    a new lease, the others that find the pool empty decide one by one in Redis
    instead of leasing too.
    """

    def __init__(self, *, max_keys: int = 100_000) -> None:
        self.max_keys = max_keys
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()
        self.local = 0  #: requests served from leased tokens
        self.taken = 0  #: leases taken

    def take(self, key: str, increment: int, now: int) -> tuple[int, int]:
        """Spend one request of ``increment`` µs from the key's pool.

        Return ``(role, debt)``: :data:`PAID` when the pool paid (``debt``
        estimates the bucket's debt now), :data:`REFILL` when this request is to
        take a new lease, :data:`SINGLE` when another request is taking it (this
        one is decided in Redis on its own).
        """
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                if len(self._pools) >= self.max_keys:
                    self._forget(now)
                pool = self._pools[key] = _Pool()
            if pool.expires > now and pool.balance >= increment:
                pool.balance -= increment
                self.local += 1
                return PAID, max(0, pool.debt - (now - pool.at))
            if pool.refilling:
                return SINGLE, 0
            pool.refilling = True
            return REFILL, 0

    def settle(
        self,
        key: str,
        role: int,
        *,
        increment: int,
        admitted: bool,
        granted: int = 0,
        debt: int = 0,
        now: int = 0,
        lease_us: int = 0,
    ) -> None:
        """Record how the request that took ``role`` for ``key`` ended.

        A paid request that was rejected (by another limit) or not decided gets
        its tokens back: a rejected request consumes nothing. A refill that was
        admitted fills the pool with ``granted`` requests' worth, one of them
        this request's; ``debt`` is the bucket's debt after it, read ``now``.
        """
        with self._lock:
            pool = self._pools.get(key)
            if pool is None or role == SINGLE:
                return
            if role == PAID:
                if not admitted:
                    pool.balance += increment
                return
            pool.refilling = False
            if admitted and granted:
                self.taken += 1
                pool.balance = (granted - 1) * increment
                pool.expires, pool.debt, pool.at = now + lease_us, debt, now

    def _forget(self, now: int) -> None:
        """Drop the pools that hold nothing spendable (called under the lock)."""
        idle = [
            key
            for key, pool in self._pools.items()
            if not pool.refilling and (pool.expires <= now or not pool.balance)
        ]
        for key in idle:
            del self._pools[key]

    def held(self) -> int:
        """µs of leased refill time held right now, over every key (for tests and benches)."""
        with self._lock:
            return sum(pool.balance for pool in self._pools.values())
