"""Decision events: every decision, buffered in memory and flushed to a Redis stream;
and the Prometheus counter of decisions made without Redis (:class:`DegradedCounter`).

The request path pays for :meth:`DecisionEvents.add` only: a length check, a
few attribute reads and a deque append of a tuple of plain values (the
decision itself is not kept: holding thousands of them alive until the flush
would cost every request more, in memory and garbage collection, than the
append does). A daemon thread wakes every
``interval`` seconds, encodes what accumulated and writes it with pipelined
``XADD ... MAXLEN ~ maxlen`` (approximate trimming: cheap, and the stream stays
bounded). A flush that fails (Redis down or paused) keeps what it could not
write, counted into records, and the next flush writes it first: an outage
loses nothing until the events held (buffered or kept for the retry) reach
``capacity`` (100,000: 100 s of 1,000 decisions a second). Past that, new events
are dropped and counted, never waited for; every entry reports the drops since
the previous one, so the control plane sees the loss (its dashboard shows it).
A retried write that had in fact reached Redis before its reply was lost is
counted twice: the price of losing nothing to an ordinary outage.

Event times are the decisions' times on Redis's clock (``Decision.at``), not
the gateway's: a gateway whose clock is off still lands its traffic in the
right minute of the dashboards.

The flush counts identical decisions of the same second together: a hot
tenant's thousands of decisions per second become a few records, which keeps
the flush cheap (it shares the CPU with requests) and the stream small. Stream
entries (``docs/stats.md``) carry up to ``batch`` records each, so Redis sees a
few XADDs per second per gateway, not one per decision::

    v        "1": the entry format
    gw       the gateway id
    dropped  events this gateway dropped since its previous entry
    events   JSON array of [epoch ms, tenant, route, policy, version, outcome, limit, count]

    rehearsals  (only while a version is rehearsed) JSON array of
                [epoch ms, tenant, route, rehearsed version, requests, would reject]

A record stands for ``count`` decisions of that second (``epoch ms`` is the
second's start) with the same tenant, route, policy, snapshot version, outcome
and deciding limit. ``tenant`` and ``route`` are "" when unknown; ``policy`` is
``scope/route`` (``~`` marks an override); ``limit`` names the deciding limit of
a rejection (``user-min``, ``tenant-concurrent``), "" otherwise.

A rehearsal record counts the decisions of that second, tenant and route that
rehearsed a scheduled version (:mod:`.rehearsal`), and how many of them that
version would have rejected. They are in a field of their own, so a consumer
that knows only ``events`` reads the same records as before.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .bucket import STORE_ERRORS, Client
from .decision import Decision, Outcome
from .rehearsal import Rehearsed
from .rules import FailureMode, Policy
from .validation import policy_ref

__all__ = [
    "STREAM_KEY",
    "DecisionEvents",
    "DegradedCounter",
    "count_events",
    "count_rehearsals",
]

STREAM_KEY = "sluice:decisions"  #: the stream the control plane aggregates
ENTRY_FORMAT = "1"

logger = logging.getLogger("sluice.metrics")
_LIMITED = Outcome.LIMITED

#: What the buffer holds per decision: (epoch s, tenant, route, policy ref, version,
#: outcome, limit, what a rehearsal said or None). Plain values only, so that the
#: Decision itself is freed at once and the garbage collector never has to look at
#: buffered events.
_Event = tuple[float, str, str, str, int, str, str, Rehearsed | None]


def count_events(events: list[_Event]) -> list[list[Any]]:
    """Records of ``events``: identical decisions of one second counted together."""
    counts: dict[tuple[Any, ...], int] = {}
    for at, tenant, route, policy, version, outcome, limit, _ in events:
        key = (int(at), tenant, route, policy, version, outcome, limit)
        counts[key] = counts.get(key, 0) + 1
    return [[key[0] * 1000, *key[1:], n] for key, n in counts.items()]


def count_rehearsals(events: list[_Event]) -> list[list[Any]]:
    """Rehearsal records of ``events``: per second, tenant, route and rehearsed
    version, the decisions that rehearsed it and those it would have rejected."""
    counts: dict[tuple[int, str, str, int], list[int]] = {}
    for at, tenant, route, _, _, _, _, rehearsed in events:
        if rehearsed is not None:
            key = (int(at), tenant, route, rehearsed.version)
            tally = counts.setdefault(key, [0, 0])
            tally[0] += 1
            tally[1] += rehearsed.rejected
    return [[key[0] * 1000, *key[1:], *n] for key, n in counts.items()]


class DecisionEvents:
    """A bounded buffer of decisions and the thread that flushes it to ``stream``.

    ``client`` is a Redis or Redis Cluster client of the Redis the control plane
    reads (not necessarily the buckets' one). Call :meth:`start` in each
    process that decides (after a fork), :meth:`stop` to flush and end.
    """

    def __init__(
        self,
        client: Client,
        *,
        gateway_id: str,
        stream: str = STREAM_KEY,
        capacity: int = 100_000,
        batch: int = 500,  #: records per stream entry
        interval: float = 1.0,
        maxlen: int = 100_000,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.gateway_id, self.stream = client, gateway_id, stream
        self.capacity, self.batch, self.interval = capacity, batch, interval
        self.maxlen = maxlen
        self._wall = wall
        self._buffer: collections.deque[_Event] = collections.deque()
        self._retry: list[list[Any]] = []  #: records a failed flush kept, oldest first
        self._retry_rehearsals: list[list[Any]] = []  #: rehearsal records kept too
        self._retry_events = 0  #: events those records stand for
        self._refs: dict[int, tuple[Policy, str]] = {}
        self.dropped = 0  #: events dropped so far (buffer full, or a failed flush)
        self._reported = 0  #: of ``dropped``, how many entries already reported
        self.written = 0  #: events written to the stream so far
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, tenant: str | None, decision: Decision) -> None:
        """Buffer one decision; drop and count it when ``capacity`` events are held. Never blocks."""
        if len(self._buffer) + self._retry_events >= self.capacity:
            self.dropped += 1
            return
        policy, outcome, deciding = decision.policy, decision.outcome, decision.deciding
        ref = self._refs.get(id(policy))
        if ref is None or ref[0] is not policy:
            ref = self._ref(policy)
        self._buffer.append(
            (
                decision.at or self._wall(),
                tenant or "",
                decision.route or "",
                ref[1],
                decision.snapshot_version,
                outcome.value,
                deciding.name if outcome is _LIMITED and deciding is not None else "",
                decision.rehearsed,
            )
        )

    def _ref(self, policy: Policy) -> tuple[Policy, str]:
        """The policy's ``scope/route`` text, computed once per policy (kept alive with it)."""
        if len(self._refs) >= 10_000:  # snapshots come and go: forget the old ones
            self._refs.clear()
        ref = self._refs[id(policy)] = (policy, policy_ref(policy))
        return ref

    def __len__(self) -> int:
        """Events held: buffered, and kept from failed flushes for the next one."""
        return len(self._buffer) + self._retry_events

    def flush(self) -> int:
        """Write what is held now, in entries of ``batch`` records; return how many events.

        What a failed write could not send is kept for the next flush.
        """
        with self._flush_lock:
            events = self._drain()
            if not events and not self._retry and self.dropped == self._reported:
                return 0
            records = self._retry + count_events(events)
            rehearsals = self._retry_rehearsals + count_rehearsals(events)
            count = self._retry_events + len(events)
            try:
                self._write(records, rehearsals)
            except STORE_ERRORS as exc:
                if not self._retry:  # one line per outage, not one per second
                    logger.warning(
                        "decision_events.flush_failed: %d events kept for a retry: %s",
                        count,
                        exc,
                    )
                self._retry, self._retry_events = records, count
                self._retry_rehearsals = rehearsals
                return 0
            if self._retry:
                logger.info("decision_events.flushed: %d held events written", count)
            self._retry, self._retry_events, self._retry_rehearsals = [], 0, []
            self.written += count
            return count

    def _drain(self) -> list[_Event]:
        buffer, events = self._buffer, []
        for _ in range(len(buffer)):  # only what is there now: adds go on meanwhile
            events.append(buffer.popleft())
        return events

    def _write(self, records: list[list[Any]], rehearsals: list[list[Any]]) -> None:
        pipe = self.client.pipeline(transaction=False)
        chunks, extra = _chunks(records, self.batch), _chunks(rehearsals, self.batch)
        dropped = self.dropped
        for index in range(max(len(chunks), len(extra), 1)):
            fields: dict[Any, Any] = {
                "v": ENTRY_FORMAT,
                "gw": self.gateway_id,
                "dropped": dropped - self._reported if index == 0 else 0,
                "events": _json(chunks[index] if index < len(chunks) else []),
            }
            if index < len(extra):
                fields["rehearsals"] = _json(extra[index])
            pipe.xadd(self.stream, fields, maxlen=self.maxlen, approximate=True)
        pipe.execute()
        self._reported = dropped

    # -- the background thread ---------------------------------------------

    def start(self) -> DecisionEvents:
        """Flush every ``interval`` seconds in a daemon thread. Returns self."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="sluice-decision-events", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread after a last flush."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
            except Exception:  # the flusher must outlive any bug; requests never see it
                logger.exception("decision_events.flush_crashed")


def _chunks(records: list[list[Any]], size: int) -> list[list[list[Any]]]:
    return [records[i : i + size] for i in range(0, len(records), size)]


def _json(records: list[list[Any]]) -> str:
    return json.dumps(records, separators=(",", ":"))


class DegradedCounter:
    """Decisions a failure mode made (Redis failed, late or its circuit open), by mode.

    Every limiter keeps one (``limiter.degraded``), counted on each decision it
    records. A Prometheus counter, ``sluice_client_degraded_decisions_total``
    with a ``mode`` label (``open``, ``local``, ``closed``, ``open-unbounded``):
    register it with prometheus_client (``REGISTRY.register(limiter.degraded)``)
    or serve :meth:`exposition` yourself. Not counted: answers a gateway gave
    itself (:attr:`~.decision.Outcome.GATEWAY_TIMEOUT`).
    """

    NAME = "sluice_client_degraded_decisions"
    HELP = "Decisions made without Redis, by the failure mode that made them."
    #: seconds between two ``limiter.degraded`` log lines at the most
    LOG_EVERY = 60.0

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys((mode.value for mode in FailureMode), 0)
        self._clock = clock
        self._logged_at: float | None = None
        self._unlogged: collections.Counter[str] = collections.Counter()

    def add(self, decision: Decision) -> None:
        """Count ``decision`` if a failure mode made it, and say so in the log: the
        first at once, then what came since at most every :attr:`LOG_EVERY` s, so
        that a gateway's log shows what its dashboards count (a Redis call late by
        a few ms degrades one decision without opening the circuit, which alone
        logs ``limiter.store_down``)."""
        mode = decision.failure_mode
        if mode is None or decision.outcome is Outcome.GATEWAY_TIMEOUT:
            return
        with self._lock:  # only degraded decisions pay for it
            self._counts[mode] = self._counts.get(mode, 0) + 1
            self._unlogged[mode] += 1
            now = self._clock()
            if self._logged_at is not None and now - self._logged_at < self.LOG_EVERY:
                return
            since = (
                ""
                if self._logged_at is None
                else f" in the last {now - self._logged_at:.0f} s"
            )
            counted, self._unlogged = self._unlogged, collections.Counter()
            self._logged_at = now
        modes = ", ".join(f"{m} {n}" for m, n in sorted(counted.items()))
        logger.warning(
            "limiter.degraded: %d decision(s) by failure mode%s (%s); last: %s",
            sum(counted.values()),
            since,
            modes,
            decision.error or "Redis not used",
        )

    def counts(self) -> dict[str, int]:
        """Decisions per failure mode so far (every mode, 0 included)."""
        with self._lock:
            return dict(self._counts)

    def exposition(self) -> str:
        """The counter in Prometheus' text format."""
        lines = [
            f"# HELP {self.NAME}_total {self.HELP}",
            f"# TYPE {self.NAME}_total counter",
        ]
        lines += [
            f'{self.NAME}_total{{mode="{mode}"}} {count}'
            for mode, count in self.counts().items()
        ]
        return "\n".join(lines) + "\n"

    def collect(self) -> Any:
        """prometheus_client's collector protocol (imported only when it is asked)."""
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.NAME, self.HELP, labels=["mode"])
        for mode, count in self.counts().items():
            family.add_metric([mode], count)
        yield family
