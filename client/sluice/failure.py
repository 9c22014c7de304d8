"""What the limiter does when Redis fails: a circuit breaker and the per-route modes.

Each route carries a failure mode in the snapshot:

- ``open`` (bounded): admit through an in-process token bucket holding the
  route's *whole* limit, for this gateway alone. A Redis stall of ``s`` seconds
  then lets through at most ``burst + rate x s`` per gateway process and key
  (the fleet: ``gateways x (burst + rate x s)``), instead of everything. A key
  Redis rejected shortly before starts from the debt Redis reported (the
  reject cache's last word), so a tenant already at its limit gets about
  ``rate x s`` per gateway, not a fresh burst. What it admits is charged to
  the Redis buckets once Redis answers (:mod:`.backlog`), so calls that time
  out now and then on a busy Redis do not grant each refilled token twice;
- ``open-unbounded``: admit everything, unchecked (what ``open`` did before it
  was bounded), and mark the decision degraded and fail-open;
- ``closed``: answer 503 with ``Retry-After``: the limiter, not the client, is at fault;
- ``local``: decide with an in-process token bucket holding a conservative
  share of the limit: ``1/gateways`` of the rate and of the burst (never below
  one request), where ``gateways`` is the number of gateways expected to share
  the traffic. With N gateways sharing evenly the fleet stays under the limit;
  a gateway that gets more than its share rejects early, which is the safe side.

Concurrency limits fail the same way: ``open`` counts in process with the
whole cap, ``open-unbounded`` admits without holding a slot, ``closed``
answers 503, ``local`` counts in process with a share of the cap
(:class:`~.concurrency.LocalSlots`).

Requests that match no route use the limiter's ``unmatched`` mode (``local`` by
default: still limited, never blocked by an outage).

The :class:`CircuitBreaker` stops calling Redis when calls fail *persistently*
(a failure rate over a short window), so an outage costs a dictionary look-up
per request instead of a timeout, and probes again soon: a short stall costs
little more than itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Self

from .backlog import Charges
from .concurrency import LocalSlots, slot_statuses
from .decision import Decision, Held, Outcome
from .engine import Engine, PolicyPlan, Prepared
from .kinds import GCRA
from .rules import FailureMode

__all__ = [
    "BreakerState",
    "CircuitBreaker",
    "LocalBuckets",
    "decided_by_gateway",
    "failover",
]

_SLICES = 10  #: the breaker's window is counted in this many slices


class BreakerState(StrEnum):
    CLOSED = "closed"  #: Redis is called
    OPEN = "open"  #: Redis is not called until the cooldown ends
    HALF_OPEN = "half_open"  #: one probe is in flight


class CircuitBreaker:
    """Opens on sustained failure; probes soon, then less often while Redis stays down.

    Closed, it counts the calls of the last ``window`` seconds and opens when at
    least ``min_calls`` of them ended there and a ``failure_rate`` share of
    those failed: a stall that times out a few calls of a busy Redis does not
    open it, an outage does within about a window (at once when calls fail
    fast, as against a dead server). Open, it lets one probe through every
    ``cooldown`` seconds; once it has been open for ``patience`` seconds, each
    failed probe doubles the wait, up to ``max_cooldown``; a good call closes
    it and forgets the window. So a stall shorter than ``patience`` costs about
    itself plus at most one cooldown (0.1 s) once Redis answers again, and a
    dead Redis is probed about once per ``max_cooldown``.

    ``node``: the Redis Cluster node it guards, when it is one of a limiter's
    per-node breakers (:meth:`like`); empty for a single Redis.
    """

    def __init__(
        self,
        *,
        failure_rate: float = 0.5,
        min_calls: int = 20,
        window: float = 1.0,
        cooldown: float = 0.1,
        max_cooldown: float = 1.0,
        patience: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        node: str = "",
    ) -> None:
        if not 0.0 < failure_rate <= 1.0 or min_calls < 1 or window <= 0:
            raise ValueError("failure_rate in (0, 1], min_calls >= 1, window > 0")
        self.failure_rate, self.min_calls, self.window = failure_rate, min_calls, window
        self.cooldown, self.max_cooldown = cooldown, max(cooldown, max_cooldown)
        self.patience = patience
        self.node = node
        self._clock = clock
        self._lock = threading.Lock()
        self._slice = window / _SLICES
        self._cells: list[list[int]] = [[-1, 0, 0] for _ in range(_SLICES)]
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._down_since = 0.0  #: when it opened from closed
        self._wait = cooldown  #: the cooldown in force (grows while probes fail)

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def current_cooldown(self) -> float:
        """Seconds between probes right now (``cooldown``; doubled per failed probe
        once open for ``patience``)."""
        return self._wait

    def like(self, node: str) -> Self:
        """A new, closed breaker of this class with these settings, for Redis
        Cluster node ``node``."""
        return type(self)(
            failure_rate=self.failure_rate,
            min_calls=self.min_calls,
            window=self.window,
            cooldown=self.cooldown,
            max_cooldown=self.max_cooldown,
            patience=self.patience,
            clock=self._clock,
            node=node,
        )

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
        """Record a good call: counted when closed; otherwise the breaker closes."""
        if self._state is BreakerState.CLOSED:
            self._count(failed=False)
            return
        with self._lock:
            self._state = BreakerState.CLOSED
            self._wait = self.cooldown
            self._cells = [[-1, 0, 0] for _ in range(_SLICES)]
            self._count(failed=False)

    def failed(self) -> None:
        """Record a failed call: a failed probe reopens (for longer once open for
        ``patience``); when closed, a failure rate of ``failure_rate`` over
        ``min_calls`` calls or more opens."""
        with self._lock:
            self._count(failed=True)
            if self._state is BreakerState.HALF_OPEN:
                patient = self._clock() - self._down_since < self.patience
                self._open(
                    self._wait if patient else min(self.max_cooldown, 2 * self._wait)
                )
            elif self._state is BreakerState.CLOSED:
                calls, failures = self.counts()
                if calls >= self.min_calls and failures >= self.failure_rate * calls:
                    self._down_since = self._clock()
                    self._open(self.cooldown)

    def counts(self) -> tuple[int, int]:
        """(calls, failures) ended within the last ``window`` seconds."""
        newest = int(self._clock() / self._slice)
        calls = failures = 0
        for index, ended, failed in self._cells:
            if newest - index < _SLICES:
                calls, failures = calls + ended, failures + failed
        return calls, failures

    def retry_after(self) -> float:
        """Seconds until the next probe (or the next after a lost one); 0.0 when closed or due."""
        if self._state is BreakerState.CLOSED:
            return 0.0
        return max(0.0, self._opened_at + self._wait - self._clock())

    def _open(self, wait: float) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()
        self._wait = wait

    def _count(self, *, failed: bool) -> None:
        """Count one call in the current slice (unlocked for successes: an
        increment lost to a race only makes the rate a hair less precise)."""
        index = int(self._clock() / self._slice)
        cell = self._cells[index % _SLICES]
        if cell[0] != index:
            cell = self._cells[index % _SLICES] = [index, 0, 0]
        cell[1] += 1
        if failed:
            cell[2] += 1


class LocalBuckets:
    """In-process buckets for the ``open`` and ``local`` modes: each limit's kind
    simulated in Python (:class:`.kinds.Shape`), the state kept as a moment (µs).

    ``open`` runs them with the whole limit, ``local`` with ``1/gateways`` of
    it. Holds at most ``max_keys`` buckets; past that, the oldest are forgotten
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

    def __call__(
        self, keys: list[str], plan: PolicyPlan, owed: Sequence[int] = ()
    ) -> list[int]:
        """Decide like the script, with ``plan``'s shapes; same reply shape.

        ``owed``: per key, µs of debt known from Redis (the reject cache's last
        word); a bucket owes at least that much, so it never starts fuller than
        Redis last said it was.
        """
        now = int(self._clock() * 1_000_000)
        with self._lock:
            debts = [max(0, self._tats.get(key, now) - now) for key in keys]
            if owed:
                debts = [max(d, o) for d, o in zip(debts, owed, strict=True)]
            fits = [
                p.shape.fits(debt) for debt, p in zip(debts, plan.limits, strict=True)
            ]
            admitted = all(
                ok
                for ok, p in zip(fits, plan.limits, strict=True)
                if not p.limit.shadow
            )
            reply = [int(admitted)]
            for key, debt, ok, p in zip(keys, debts, fits, plan.limits, strict=True):
                if admitted and ok:
                    debt = p.shape.charged(debt)
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
    owed: Sequence[int] = (),
    at: float = 0.0,
    charges: Charges | None = None,
) -> Decision:
    """Decide without Redis by the route's failure mode (see the module docstring).

    ``owed``: the debts Redis last reported for ``prepared.keys`` (see
    :class:`LocalBuckets`); ``at``: the decision's time (epoch seconds, store
    clock); ``charges``: where what ``open`` admits is owed to Redis
    (:mod:`.backlog`).
    """
    mode = prepared.failure_mode
    if mode is FailureMode.LOCAL:
        share, admitted_as = local.gateways, Outcome.LOCAL
    elif mode is FailureMode.OPEN:
        share, admitted_as = 1, Outcome.FAIL_OPEN
    else:
        return _unchecked(engine, prepared, error=error, retry_after=retry_after, at=at)
    decision = _local(engine, prepared, local, slots or LocalSlots(), share, owed, at)
    if charges is not None and decision.allowed and mode is FailureMode.OPEN:
        _owe(charges, prepared, decision)
    return decision._replace(
        outcome=admitted_as if decision.allowed else decision.outcome,
        degraded=True,
        fail_open=decision.allowed and mode is FailureMode.OPEN,
        error=error,
        failure_mode=mode.value,
    )


def _local(
    engine: Engine,
    prepared: Prepared,
    local: LocalBuckets,
    slots: LocalSlots,
    share: int,
    owed: Sequence[int],
    at: float,
) -> Decision:
    """Local buckets (``share``: 1 for the whole limit), and local slots first
    when the policy caps concurrency."""
    plan = prepared.plan
    if share != 1:
        plan = engine.plan(plan.policy, prepared.cost, share, calendar=plan.calendar)
    if not prepared.slots:
        return engine.decision(
            prepared, local(prepared.keys, plan, owed), plan=plan, at=at
        )
    reply = slots.acquire(plan, prepared.slots, share=share)
    taken = tuple(k for i, k in enumerate(prepared.slots) if reply[1 + 2 * i] == 1)
    held = Held(taken, "", local=True) if reply[0] == 1 and taken else None
    statuses = slot_statuses(plan, prepared.slots, reply, 1)
    if reply[0] != 1:  # no slot: the buckets are not charged
        return engine.conclude(prepared, plan, statuses, False, at=at)
    decision = engine.decision(
        prepared, local(prepared.keys, plan, owed), plan=plan, at=at
    )
    if not decision.allowed:
        if held is not None:
            slots.release(held.keys)
        return decision
    statuses = decision.statuses + statuses
    return engine.conclude(prepared, plan, statuses, True, at=at)._replace(held=held)


def _owe(charges: Charges, prepared: Prepared, decision: Decision) -> None:
    """Owe Redis what the local buckets just charged (the GCRA limits that fit;
    ``charge.lua`` knows GCRA only, so a sliding window's local admissions are
    not paid back)."""
    owed = [
        (key, p.geometry, s.fits)
        for key, p, s in zip(
            prepared.keys, prepared.plan.limits, decision.statuses, strict=False
        )
        if p.kind is GCRA
    ]
    if owed:
        charges.add(
            tuple(key for key, _, _ in owed),
            tuple(g.increment if fits else 0 for _, g, fits in owed),
            tuple(g.capacity for _, g, _ in owed),
        )


def _unchecked(
    engine: Engine, prepared: Prepared, *, error: str, retry_after: float, at: float
) -> Decision:
    """Fail open unbounded (admit) or closed (503), by the route's mode; no bucket was consulted."""
    allowed = prepared.failure_mode is FailureMode.OPEN_UNBOUNDED
    return _unbucketed(
        engine,
        prepared,
        allowed=allowed,
        status=200 if allowed else 503,
        outcome=Outcome.FAIL_OPEN if allowed else Outcome.FAIL_CLOSED,
        retry_after=None if allowed else max(retry_after, 1.0),
        error=error,
        at=at,
    )


def decided_by_gateway(engine: Engine, prepared: Prepared, *, at: float) -> Decision:
    """A request the gateway stopped waiting for: its own failure behaviour
    answered it (Envoy's ``failure_mode_deny``, a forward-auth timeout), not
    Sluice. Never rendered; recorded so the decision events count it."""
    return _unbucketed(
        engine,
        prepared,
        allowed=False,
        status=0,
        outcome=Outcome.GATEWAY_TIMEOUT,
        retry_after=None,
        error="the gateway stopped waiting",
        at=at,
    )


def _unbucketed(
    engine: Engine,
    prepared: Prepared,
    *,
    allowed: bool,
    status: int,
    outcome: Outcome,
    retry_after: float | None,
    error: str,
    at: float,
) -> Decision:
    """A degraded decision that consulted no bucket."""
    return Decision(
        allowed=allowed,
        status=status,
        outcome=outcome,
        deciding=None,
        limit=0,
        remaining=0,
        reset=0.0,
        retry_after=retry_after,
        policy=prepared.plan.policy,
        snapshot_version=engine.version,
        route=prepared.route,
        statuses=(),
        degraded=True,
        fail_open=allowed,
        error=error,
        at=at,
        failure_mode=prepared.failure_mode.value,
    )
