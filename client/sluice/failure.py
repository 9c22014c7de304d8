"""What the limiter does when Redis fails: a circuit breaker and the per-route modes.

Each route carries a failure mode in the snapshot:

- ``open``: admit, and mark the decision degraded and fail-open;
- ``closed``: answer 503 with ``Retry-After``: the limiter, not the client, is at fault;
- ``local``: decide with an in-process token bucket holding a conservative
  share of the limit: ``1/gateways`` of the rate and of the burst (never below
  one request), where ``gateways`` is the number of gateways expected to share
  the traffic. With N gateways sharing evenly the fleet stays under the limit;
  a gateway that gets more than its share rejects early, which is the safe side.

Concurrency limits fail the same way: ``open`` admits without holding a slot,
``closed`` answers 503, ``local`` counts in process (:class:`~.concurrency.LocalSlots`).

Requests that match no route use the limiter's ``unmatched`` mode (``local`` by
default: still limited, never blocked by an outage).

The :class:`CircuitBreaker` stops calling Redis after ``threshold`` failures
in a row, so an outage costs a dictionary look-up per request instead of a
timeout, and lets one probe through every ``cooldown`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum

from .concurrency import LocalSlots, slot_statuses
from .decision import Decision, Held, Outcome
from .engine import Engine, PolicyPlan, Prepared
from .rules import FailureMode

__all__ = ["BreakerState", "CircuitBreaker", "LocalBuckets", "failover"]


class BreakerState(StrEnum):
    CLOSED = "closed"  #: Redis is called
    OPEN = "open"  #: Redis is not called until the cooldown ends
    HALF_OPEN = "half_open"  #: one probe is in flight


class CircuitBreaker:
    """Trips after ``threshold`` consecutive failures; probes once per ``cooldown`` seconds.

    ``node``: the Redis Cluster node it guards, when it is one of a limiter's
    per-node breakers (:meth:`like`); empty for a single Redis.
    """

    def __init__(
        self,
        *,
        threshold: int = 5,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        node: str = "",
    ) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.node = node
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0

    @property
    def state(self) -> BreakerState:
        return self._state

    def like(self, node: str) -> CircuitBreaker:
        """A new, closed breaker with these settings, for Redis Cluster node ``node``."""
        return CircuitBreaker(
            threshold=self.threshold,
            cooldown=self.cooldown,
            clock=self._clock,
            node=node,
        )

    @property
    def troubled(self) -> bool:
        """Whether a success must be recorded: failures counted, or not closed."""
        return self._failures > 0 or self._state is not BreakerState.CLOSED

    def allow(self) -> bool:
        """Whether to call Redis now; when not closed, True once per cooldown (the probe).

        A probe that never reports (its caller raised something that is not a
        store error, or its thread died) is replaced after a cooldown: the
        breaker must not stay half-open, failing every request, forever.
        """
        if self._state is BreakerState.CLOSED:
            return True
        with self._lock:
            if self.retry_after() == 0.0:
                self._state = BreakerState.HALF_OPEN
                # the next probe is due a cooldown later, in case this one is lost
                self._opened_at = self._clock()
                return True
            return False

    def succeeded(self) -> None:
        """Record a good call: the breaker closes."""
        if self._failures or self._state is not BreakerState.CLOSED:
            with self._lock:
                self._failures = 0
                self._state = BreakerState.CLOSED

    def failed(self) -> None:
        """Record a failed call: a failed probe, or the ``threshold``-th failure, opens."""
        with self._lock:
            self._failures += 1
            if (
                self._state is BreakerState.HALF_OPEN
                or self._failures >= self.threshold
            ):
                self._state = BreakerState.OPEN
                self._opened_at = self._clock()

    def retry_after(self) -> float:
        """Seconds until the next probe (or the next after a lost one); 0.0 when closed or due."""
        if self._state is BreakerState.CLOSED:
            return 0.0
        return max(0.0, self._opened_at + self.cooldown - self._clock())


class LocalBuckets:
    """In-process token buckets for the ``local`` mode: the script's algorithm in Python.

    Holds at most ``max_keys`` buckets; past that, the oldest are forgotten
    (a forgotten bucket is full, so this errs on admitting, within one burst).
    """

    def __init__(
        self,
        *,
        gateways: int = 4,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if gateways < 1:
            raise ValueError("gateways must be at least 1")
        self.gateways = gateways
        self.max_keys = max_keys
        self._clock = clock
        self._tats: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, keys: list[str], plan: PolicyPlan) -> list[int]:
        """Decide like the script, with ``plan``'s (shared-out) geometry; same reply shape."""
        now = int(self._clock() * 1_000_000)
        with self._lock:
            debts = [max(0, self._tats.get(key, now) - now) for key in keys]
            fits = [
                debt + p.geometry.increment <= p.geometry.capacity
                for debt, p in zip(debts, plan.limits, strict=True)
            ]
            admitted = all(
                ok
                for ok, p in zip(fits, plan.limits, strict=True)
                if not p.limit.shadow
            )
            reply = [int(admitted)]
            for key, debt, ok, p in zip(keys, debts, fits, plan.limits, strict=True):
                if admitted and ok:
                    debt += p.geometry.increment
                    self._remember(key, now + debt)
                reply += [int(ok), debt]
            return reply

    def _remember(self, key: str, tat: int) -> None:
        self._tats.pop(key, None)  # re-insert: the dict's order is the age order
        self._tats[key] = tat
        while len(self._tats) > self.max_keys:
            del self._tats[next(iter(self._tats))]


def failover(
    engine: Engine,
    prepared: Prepared,
    *,
    error: str,
    local: LocalBuckets,
    retry_after: float,
    slots: LocalSlots | None = None,
) -> Decision:
    """Decide without Redis by the route's failure mode (see the module docstring)."""
    if prepared.failure_mode is FailureMode.LOCAL:
        decision = _local(engine, prepared, local, slots or LocalSlots())
        outcome = decision.outcome if not decision.allowed else Outcome.LOCAL
        return _degrade(decision, outcome=outcome, error=error)
    return _unchecked(engine, prepared, error=error, retry_after=retry_after)


def _local(
    engine: Engine, prepared: Prepared, local: LocalBuckets, slots: LocalSlots
) -> Decision:
    """Local buckets, and local slots first when the policy caps concurrency."""
    plan = engine.plan(prepared.plan.policy, prepared.cost, local.gateways)
    if not prepared.slots:
        return engine.decision(prepared, local(prepared.keys, plan), plan=plan)
    reply = slots.acquire(plan, prepared.slots)
    taken = tuple(k for i, k in enumerate(prepared.slots) if reply[1 + 2 * i] == 1)
    held = Held(taken, "", local=True) if reply[0] == 1 and taken else None
    statuses = slot_statuses(plan, prepared.slots, reply, 1)
    if reply[0] != 1:  # no slot: the buckets are not charged
        return engine.conclude(prepared, plan, statuses, False)
    decision = engine.decision(prepared, local(prepared.keys, plan), plan=plan)
    if not decision.allowed:
        if held is not None:
            slots.release(held.keys)
        return decision
    statuses = decision.statuses + statuses
    return engine.conclude(prepared, plan, statuses, True)._replace(held=held)


def _unchecked(
    engine: Engine, prepared: Prepared, *, error: str, retry_after: float
) -> Decision:
    """Fail open (admit) or closed (503), by the route's mode; no bucket was consulted."""
    allowed = prepared.failure_mode is FailureMode.OPEN
    return Decision(
        allowed=allowed,
        status=200 if allowed else 503,
        outcome=Outcome.FAIL_OPEN if allowed else Outcome.FAIL_CLOSED,
        deciding=None,
        limit=0,
        remaining=0,
        reset=0.0,
        retry_after=None if allowed else max(retry_after, 1.0),
        policy=prepared.plan.policy,
        snapshot_version=engine.version,
        route=prepared.route,
        statuses=(),
        degraded=True,
        fail_open=allowed,
        error=error,
    )


def _degrade(decision: Decision, *, outcome: Outcome, error: str) -> Decision:
    return decision._replace(outcome=outcome, degraded=True, error=error)
