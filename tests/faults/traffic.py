"""Steady decision traffic from a few threads, recorded for fault tests (and the fault bench).

Each thread cycles through the three failure modes (``search`` fails open,
``orders.read`` closed, ``orders.create`` local) on many tenants, and every
decision is kept with its time and latency, so a test can look at what
happened before, during and after a fault. Decisions are kept as they are
answered (``seen`` grows while the threads run), so a test can wait until
something was decided instead of sleeping and hoping it was.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sluice import BreakerState, CircuitBreaker, Decision, Limiter, Outcome
from tests.celery_fixtures import wait_until
from tests.client.factories import limit, policy, rules, snapshot

#: Generous limits: nothing is rejected unless the store is down.
RULES = snapshot(rules(policy("default", "*", limit("tenant", 100_000, 1, 100_000))))
ROUTES = (("GET", "/v1/search"), ("GET", "/v1/orders/1"), ("POST", "/v1/orders"))
#: What each route answers while Redis cannot be used.
DEGRADED = {
    "search": {Outcome.FAIL_OPEN},
    "orders.read": {Outcome.FAIL_CLOSED},
    "orders.create": {Outcome.LOCAL, Outcome.LIMITED},
}
#: How long a test waits for something the product must do at all (a breaker
#: opening, a decision answered while Redis is paused, Redis used again): a
#: bound for a hang, never a verdict on this machine's speed.
PATIENCE = 60.0


@dataclass(frozen=True, slots=True)
class Seen:
    at: float  #: monotonic time the decision was asked
    seconds: float  #: how long it took
    decision: Decision
    tenant: str = ""
    source: int = 0  #: which thread (Traffic) or which limiter (Hammer) decided it

    @property
    def answered(self) -> float:
        """Monotonic time the answer came."""
        return self.at + self.seconds

    @property
    def refused(self) -> bool:
        """Decided without asking Redis because the breaker was open."""
        return self.decision.error == "circuit open"

    @property
    def timed_out(self) -> bool:
        """Its Redis call ran out of the limiter's timeout."""
        return "Timeout" in (self.decision.error or "")


@dataclass
class Traffic:
    """``threads`` threads deciding with ``limiter`` until :meth:`stop`."""

    limiter: Limiter
    threads: int = 4
    tenants: int = 1000
    seen: list[Seen] = field(default_factory=list)  #: in answer order, while running
    peak_threads: int = 0
    errors: list[BaseException] = field(default_factory=list)  #: what killed a thread
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Traffic:
        for index in range(self.threads):
            thread = threading.Thread(target=self._run, args=(index,), daemon=True)
            self._pool.append(thread)
            thread.start()
        return self

    def _run(self, index: int) -> None:
        requests = itertools.cycle(
            (method, path, f"t{n}")
            for n in range(index, self.tenants, self.threads)
            for method, path in ROUTES
        )
        try:
            while not self._stop.is_set():
                method, path, tenant = next(requests)
                began = time.monotonic()
                decision = self.limiter.decide(method=method, path=path, tenant=tenant)
                self.seen.append(
                    Seen(began, time.monotonic() - began, decision, tenant, index)
                )
                self.peak_threads = max(self.peak_threads, threading.active_count())
        except BaseException as exc:  # decide must never raise: stop() reports it
            self.errors.append(exc)

    def stop(self, timeout: float = 30.0) -> list[Seen]:
        """Stop every thread and return what was seen, in time order."""
        return stop_threads(self, timeout)


def wait_seen(
    runner: Traffic | Hammer,
    condition: Callable[[list[Seen]], object],
    *,
    since: int = 0,
    timeout: float = PATIENCE,
    why: str = "",
):
    """Poll ``condition`` over the decisions answered from index ``since`` of
    ``runner.seen`` on (``len(runner.seen)`` taken at a moment: everything
    answered after it) until it holds; return what it returned. Fails if a
    runner's thread died meanwhile, or after ``timeout``."""

    def check():
        assert not runner.errors, f"decide raised: {runner.errors!r}"
        return condition(runner.seen[since:])

    return wait_until(check, timeout=timeout, every=0.05, why=why or str(condition))


def each_source(runner: Traffic | Hammer, seen: list[Seen]) -> bool:
    """Whether every thread (Traffic) or every limiter (Hammer) has a decision in ``seen``."""
    sources = runner.threads if isinstance(runner, Traffic) else len(runner.limiters)
    return len({s.source for s in seen}) == sources


def between(seen: list[Seen], start: float, end: float) -> list[Seen]:
    """Decisions asked at ``start`` or later that had their answer before ``end``."""
    return [s for s in seen if start <= s.at and s.answered < end]


def first_healthy_after(seen: list[Seen], moment: float) -> float | None:
    """Seconds from ``moment`` to the answer of the first decision asked after it
    that used Redis: when Redis was known to answer again. (Its ask time would be
    too early: that first call is the breaker's probe, which on a loaded machine
    reconnects and reloads the script for most of a second while the others are
    still decided by failure mode.)"""
    answers = [s.answered for s in seen if s.at >= moment and not s.decision.degraded]
    return min(answers) - moment if answers else None


def wrong_modes(seen: list[Seen]) -> list[Seen]:
    """Degraded decisions whose outcome is not their route's failure mode."""
    return [
        s
        for s in seen
        if s.decision.degraded and s.decision.outcome not in DEGRADED[s.decision.route]
    ]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


class WatchedBreaker(CircuitBreaker):
    """A :class:`CircuitBreaker` that checks its own promise on every refusal.

    The promise (``sluice.failure``): once open, it lets a probe through every
    ``cooldown``, a wait that may only grow (doubling, up to ``max_cooldown``)
    once it has been open for ``patience``. So a refusal comes at most the wait
    in force after the breaker last heard of Redis (a failed call, or a probe it
    let through). Each refusal later than that is kept in ``late``: what a
    breaker that stays open for a fixed second, or doubles too early, does.

    Judged on the breaker's own clock, with moments taken so that a thread
    stalled by a loaded machine can only make a refusal look earlier than it
    was (never later): the verdict does not depend on the machine's speed.
    """

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._watch = threading.Lock()
        self._heard = -math.inf  #: the last failure or probe, taken after it
        self._down = math.inf  #: when it opened from closed, taken before it
        self.late: list[tuple[float, float]] = []  #: (seconds since heard, allowed)
        self.refusals = 0
        self.longest_wait = self.cooldown  #: the longest wait it allowed itself

    def allow(self) -> bool:
        if self.state is BreakerState.CLOSED:
            return super().allow()
        with self._watch:
            asked = time.monotonic()  # before the breaker reads its clock
            allowed = super().allow()
            if allowed:
                self._heard = time.monotonic()  # a probe: the breaker heard of Redis
                return True
            self.refusals += 1
            patient = self._heard - self._down < self.patience
            may_wait = self.cooldown if patient else self.max_cooldown
            self.longest_wait = max(self.longest_wait, self.current_cooldown)
            if asked - self._heard > may_wait:
                self.late.append((asked - self._heard, may_wait))
            return False

    def failed(self) -> None:
        with self._watch:
            was, before = self.state, time.monotonic()
            super().failed()
            if was is BreakerState.CLOSED and self.state is not BreakerState.CLOSED:
                self._down = before
            self._heard = time.monotonic()


@dataclass
class Hammer:
    """``threads`` threads per limiter sending ``tenants``' requests as fast as they
    can (each limiter one gateway process); every decision kept, in time order."""

    limiters: list[Limiter]
    route: str = "search"
    tenants: tuple[str, ...] = ("acme",)  #: each thread cycles through them
    threads: int = 4
    seen: list[Seen] = field(default_factory=list)  #: in answer order, while running
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Hammer:
        for index, limiter in enumerate(self.limiters):
            for _ in range(self.threads):
                thread = threading.Thread(
                    target=self._run, args=(limiter, index), daemon=True
                )
                self._pool.append(thread)
                thread.start()
        return self

    def _run(self, limiter: Limiter, index: int) -> None:
        tenants = itertools.cycle(self.tenants)
        try:
            while not self._stop.is_set():
                tenant = next(tenants)
                began = time.monotonic()
                decision = limiter.decide(route=self.route, tenant=tenant)
                self.seen.append(
                    Seen(began, time.monotonic() - began, decision, tenant, index)
                )
                if decision.held is not None:
                    limiter.release(decision)
        except BaseException as exc:  # decide must never raise: stop() reports it
            self.errors.append(exc)

    def stop(self, timeout: float = 30.0) -> list[Seen]:
        """Stop every thread and return what was seen, in time order."""
        return stop_threads(self, timeout)


def stop_threads(runner: Traffic | Hammer, timeout: float) -> list[Seen]:
    """Stop ``runner``'s threads; what they saw, in time order. Fails if one hung
    or if ``decide`` raised (it never may)."""
    runner._stop.set()
    for thread in runner._pool:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in runner._pool), "a thread hung"
    assert not runner.errors, f"decide raised: {runner.errors!r}"
    return sorted(runner.seen, key=lambda s: s.at)
