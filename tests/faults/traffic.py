"""Steady decision traffic from a few threads, recorded for fault tests (and the fault bench).

Each thread cycles through the three failure modes (``search`` fails open,
``orders.read`` closed, ``orders.create`` local) on many tenants, and every
decision is kept with its time and latency, so a test can look at what
happened before, during and after a fault.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from sluice import BreakerState, Decision, Limiter, Outcome
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


@dataclass(frozen=True, slots=True)
class Seen:
    at: float  #: monotonic time the decision was asked
    seconds: float  #: how long it took
    decision: Decision
    tenant: str = ""


@dataclass
class Traffic:
    """``threads`` threads deciding with ``limiter`` until :meth:`stop`."""

    limiter: Limiter
    threads: int = 4
    tenants: int = 1000
    seen: list[Seen] = field(default_factory=list)
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
        mine = []
        try:
            while not self._stop.is_set():
                method, path, tenant = next(requests)
                began = time.monotonic()
                decision = self.limiter.decide(method=method, path=path, tenant=tenant)
                mine.append(Seen(began, time.monotonic() - began, decision, tenant))
                self.peak_threads = max(self.peak_threads, threading.active_count())
        except BaseException as exc:  # decide must never raise: stop() reports it
            self.errors.append(exc)
        finally:
            self.seen.extend(mine)

    def stop(self, timeout: float = 30.0) -> list[Seen]:
        """Stop every thread and return what was seen, in time order."""
        return stop_threads(self, timeout)


def until_recovered(limiter: Limiter, within: float = 6.0, then: float = 1.0) -> None:
    """Wait until ``limiter`` uses Redis again (its breaker closes), ``within`` s at most,
    then ``then`` s more: a stalled machine gets time, a test still sees what follows."""
    deadline = time.monotonic() + within
    while (
        limiter.breaker.state is not BreakerState.CLOSED and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    time.sleep(then)


def between(seen: list[Seen], start: float, end: float) -> list[Seen]:
    """Decisions asked at ``start`` or later that had their answer before ``end``."""
    return [s for s in seen if start <= s.at and s.at + s.seconds < end]


def first_healthy_after(seen: list[Seen], moment: float) -> float | None:
    """Seconds from ``moment`` to the answer of the first decision asked after it
    that used Redis: when Redis was known to answer again. (Its ask time would be
    too early: that first call is the breaker's probe, which on a loaded machine
    reconnects and reloads the script for most of a second while the others are
    still decided by failure mode.)"""
    for item in seen:
        if item.at >= moment and not item.decision.degraded:
            return item.at + item.seconds - moment
    return None


def wrong_modes(seen: list[Seen]) -> list[Seen]:
    """Degraded decisions whose outcome is not their route's failure mode."""
    return [
        s
        for s in seen
        if s.decision.degraded and s.decision.outcome not in DEGRADED[s.decision.route]
    ]


@dataclass
class Hammer:
    """``threads`` threads per limiter sending ``tenants``' requests as fast as they
    can (each limiter one gateway process); every decision kept, in time order."""

    limiters: list[Limiter]
    route: str = "search"
    tenants: tuple[str, ...] = ("acme",)  #: each thread cycles through them
    threads: int = 4
    seen: list[Seen] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Hammer:
        for limiter in self.limiters:
            for _ in range(self.threads):
                thread = threading.Thread(
                    target=self._run, args=(limiter,), daemon=True
                )
                self._pool.append(thread)
                thread.start()
        return self

    def _run(self, limiter: Limiter) -> None:
        mine, tenants = [], itertools.cycle(self.tenants)
        try:
            while not self._stop.is_set():
                tenant = next(tenants)
                began = time.monotonic()
                decision = limiter.decide(route=self.route, tenant=tenant)
                mine.append(Seen(began, time.monotonic() - began, decision, tenant))
                if decision.held is not None:
                    limiter.release(decision)
        except BaseException as exc:  # decide must never raise: stop() reports it
            self.errors.append(exc)
        finally:
            self.seen.extend(mine)

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
