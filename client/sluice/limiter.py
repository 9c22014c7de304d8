"""The limiter gateways call: a request in, a :class:`~.decision.Decision` out.

One decision costs one Redis round trip (EVALSHA of the token-bucket script)
plus a resolution and some string formatting. Fewer when hot-key options say
so: a bucket known to reject (:class:`~.hotkeys.RejectCache`) or tokens
already leased (:mod:`.hot`) decide in process. Policies with leases or
concurrency limits run ``hot.lua`` instead, still one round trip; a request
that took concurrency slots must be released (:meth:`Limiter.release`, which
the middlewares call). :mod:`.aio` is the asyncio twin; both share
:class:`LimiterCore` and therefore behave the same.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

import redis
import redis.asyncio

from .backlog import Backlog, Charge, Charges, Orphans
from .bucket import (
    DEFAULT_REDIS_TIMEOUT,
    SCRIPT,
    STORE_ERRORS,
    Client,
    TokenBucket,
    connect,
    patient,
)
from .bundle import Bundle, SnapshotProvider, StaticSource
from .cluster import DeferredCluster
from .concurrency import LocalSlots, RequestIds
from .decision import Decision, Held
from .engine import Engine, Prepared
from .failure import BreakerState, CircuitBreaker, LocalBuckets, failover
from .hot import HotCall, cached_rejection, hot_abort, hot_begin, hot_finish
from .hotkeys import Leases, RejectCache
from .memory import MemoryScript, MemoryStore, memory_store
from .metrics import DecisionEvents, DegradedCounter
from .rehearsal import rehearsed
from .rules import FailureMode
from .scripts import CHARGE, HOT, RELEASE, Script, charge_args
from .snapshot import Snapshot

__all__ = ["Limiter", "LimiterCore"]

logger = logging.getLogger("sluice")

#: What a cluster client's slot map raises for a slot it does not hold yet or
#: does not cover (``LimiterCore.breaker_for``).
_UNMAPPED: tuple[type[Exception], ...] = (KeyError, IndexError, *STORE_ERRORS)


class CoreOptions(TypedDict, total=False):
    """The options both limiters pass to :class:`LimiterCore` (see its parameters)."""

    breaker: CircuitBreaker | None
    local: LocalBuckets | None
    unmatched: FailureMode
    wall: Callable[[], float]
    events: DecisionEvents | None
    reject_cache: bool
    clock: Callable[[], float]


class LimiterCore:
    """What the sync and asyncio limiters share: rules, breakers, local state, failover.

    ``breaker`` guards the one Redis; on a Redis Cluster it is the model of one
    breaker per master (:meth:`breaker_for`), so a master that fails only
    fails over the requests whose keys it holds, not the whole cluster's.
    ``events`` receives every decision (:class:`~.metrics.DecisionEvents`);
    ``reject_cache`` turns the cache of rejected buckets off when False;
    ``clock`` (monotonic seconds) times that cache and the leases, and carries
    Redis's clock between replies (:meth:`store_time`).

    One clock for the rules: which scheduled snapshot is in force and whether an
    override has expired are judged by :meth:`rules_time`, Redis's clock, the
    one every gateway shares, so gateways whose own clocks disagree by an hour
    still enforce the same rules at the same moment. ``wall`` (the gateway's
    own clock) is used only until Redis has told its time once.
    """

    def __init__(
        self,
        rules: SnapshotProvider | Snapshot | Bundle,
        *,
        breaker: CircuitBreaker | None = None,
        local: LocalBuckets | None = None,
        unmatched: FailureMode = FailureMode.LOCAL,
        wall: Callable[[], float] = time.time,
        events: DecisionEvents | None = None,
        reject_cache: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(rules, Snapshot | Bundle):
            rules = StaticSource(rules, wall=wall)
        self.source = rules
        self.breaker = breaker or CircuitBreaker()
        self.local = local or LocalBuckets()
        self.slots = LocalSlots(gateways=self.local.gateways)
        self.unmatched = unmatched
        self.events = events
        #: decisions the failure modes made, by mode (a Prometheus counter)
        self.degraded = DegradedCounter()
        self.rejections = RejectCache(max_keys=100_000 if reject_cache else 0)
        self.leases = Leases()
        self.request_ids = RequestIds()
        self.orphans = Orphans(clock=clock)
        self.charges = Charges(clock=clock)
        self._wall = wall
        self._clock = clock
        self._offset: float | None = None  #: Redis epoch seconds minus ``clock``
        self._time_asked = False  #: Redis TIME was asked before the first decision
        self._engine: Engine | None = None
        self._node_of: Callable[[str], str] | None = None  #: key -> cluster node name
        self._node_breakers: dict[str, CircuitBreaker] = {}

    def watch_nodes(
        self, client: Client | redis.asyncio.Redis | redis.asyncio.RedisCluster
    ) -> None:
        """Keep a breaker per master when ``client`` is a cluster client (the subclasses call it)."""
        if isinstance(client, redis.RedisCluster | redis.asyncio.RedisCluster):
            nodes, keyslot = client.nodes_manager, client.keyslot
            self._node_of = lambda key: nodes.get_node_from_slot(keyslot(key)).name
        elif isinstance(client, DeferredCluster):  # its map exists once it is made
            self._node_of = lambda key: (
                client.nodes_manager.get_node_from_slot(client.keyslot(key)).name
            )

    def breaker_for(self, prepared: Prepared) -> CircuitBreaker:
        """The breaker of the Redis node holding ``prepared``'s keys (one hash tag, one node).

        On a cluster, the node comes from the client's slot map, so once a
        replica is promoted the slots map to it and to its own, closed,
        breaker. A slot the map does not hold yet (an asyncio client maps the
        cluster on its first command) or does not cover uses the shared one.
        """
        if self._node_of is None:
            return self.breaker
        try:
            node = self._node_of(prepared.keys[0])
        except _UNMAPPED:
            return self.breaker
        breaker = self._node_breakers.get(node)
        if breaker is None:
            breaker = self._node_breakers.setdefault(node, self.breaker.like(node))
        return breaker

    def engine(self) -> Engine:
        """The engine of the snapshot in force; rebuilt only when the snapshot changes."""
        snapshot = self.source.current(self.rules_time())
        engine = self._engine
        if engine is None or engine.snapshot is not snapshot:
            engine = self._engine = Engine(
                snapshot, unmatched=self.unmatched, rehearse=self._upcoming()
            )
            self.rejections.clear()  # remembered debts were judged by the old numbers
        return engine

    def _upcoming(self) -> Snapshot | None:
        """The snapshot to rehearse (:mod:`.rehearsal`): the provider's next scheduled one.

        Asked only when the snapshot in force changes: a new bundle brings new
        snapshot objects, and the next scheduled one changes only when one
        takes effect, which changes the snapshot in force too.
        """
        upcoming = getattr(self.source, "upcoming", None)
        return upcoming(self.rules_time()) if upcoming is not None else None

    def now(self) -> int:
        """Monotonic microseconds: the time base of the reject cache and the leases."""
        return int(self._clock() * 1_000_000)

    def observe(self, redis_us: int) -> float:
        """Note the Redis time a reply carried (µs); return it in epoch seconds."""
        at = redis_us / 1_000_000
        self._offset = at - self._clock()
        return at

    def store_time(self) -> float:
        """Now on Redis's clock, carried from the last reply by ``clock`` (epoch
        seconds); 0.0 before any reply. What clients and dashboards are shown,
        so a gateway whose own clock is off changes nothing they see."""
        offset = self._offset
        return 0.0 if offset is None else self._clock() + offset

    def rules_time(self) -> float:
        """Now for the rules' own times (epoch seconds): Redis's clock, carried from
        the last reply by ``clock``; ``wall`` before Redis has answered once."""
        offset = self._offset
        return self._wall() if offset is None else self._clock() + offset

    @property
    def needs_time(self) -> bool:
        """Whether Redis has not told its time yet and has not been asked for it."""
        return self._offset is None and not self._time_asked

    def time_told(self, reply: Any) -> None:
        """Note Redis's answer to ``TIME`` (seconds, microseconds; a cluster client:
        one per node), or None when it could not be asked: ``wall`` then serves
        until a script replies."""
        self._time_asked = True
        if isinstance(reply, dict):  # every node's: they share one clock source
            reply = next(iter(reply.values()), None)
        if reply is not None:
            self.observe(int(reply[0]) * 1_000_000 + int(reply[1]))

    def cached_rejection(self, engine: Engine, prepared: Prepared) -> Decision | None:
        """A rejection decided from the reject cache, or None (ask Redis)."""
        return cached_rejection(
            engine, prepared, self.rejections, now=self.now(), at=self.store_time()
        )

    def remember(self, prepared: Prepared, reply: list[int]) -> None:
        """Note what a token-bucket reply said of the buckets (the reject cache:
        what rejected, and every bucket's debt for the failure modes)."""
        self.rejections.remember(prepared.plan, prepared.keys, reply, self.now())

    def answered(
        self, engine: Engine, prepared: Prepared, reply: list[int]
    ) -> Decision:
        """The decision of a token-bucket ``reply`` to ``prepared`` (remembered for the
        reject cache), with what its rehearsal said, if it had one."""
        self.remember(prepared, reply)
        rehearsal = prepared.rehearsal
        return engine.decision(
            prepared,
            reply,
            at=self.observe(reply[-1]),
            rehearsed=None if rehearsal is None else rehearsed(rehearsal.plan, reply),
        )

    def hot_begin(self, engine: Engine, prepared: Prepared) -> Decision | HotCall:
        """See :func:`.hot.hot_begin`."""
        return hot_begin(
            engine,
            prepared,
            self.leases,
            request_id=self.request_ids(),
            now=self.now(),
            at=self.store_time(),
        )

    def hot_finish(
        self, engine: Engine, prepared: Prepared, call: HotCall, reply: list[int]
    ) -> Decision:
        """See :func:`.hot.hot_finish`."""
        return hot_finish(
            engine,
            prepared,
            call,
            reply,
            leases=self.leases,
            rejections=self.rejections,
            now=self.now(),
        )

    def hot_failed(
        self,
        engine: Engine,
        prepared: Prepared,
        call: HotCall,
        exc: Exception,
        breaker: CircuitBreaker,
    ) -> Decision:
        self.hot_abandoned(prepared, call)  # sent, so it may have run
        return self.store_failed(engine, prepared, exc, breaker)

    def hot_abandoned(self, prepared: Prepared, call: HotCall) -> None:
        """Undo what :meth:`hot_begin` began for a call given up on before its reply
        (it may still run: slots it took are released in the background)."""
        hot_abort(prepared, call, self.leases)
        if prepared.slots:
            self.orphaned(prepared.slots, call.request_id)

    def orphaned(self, keys: tuple[str, ...], member: str) -> None:
        """Release ``member`` from ``keys`` in the background (:mod:`.backlog`)."""
        self.orphans.add(keys, member)
        self.settle()

    def settle(self) -> None:
        """Have the backlog (orphans, charges) worked off in the background: the
        subclasses run it (a thread, an asyncio task)."""

    def record(self, tenant: str | None, decision: Decision) -> Decision:
        """Hand ``decision`` to the decision events, if any, and count it if a
        failure mode made it (:attr:`degraded`); return it."""
        if self.events is not None:
            self.events.add(tenant, decision)
        if decision.degraded:
            self.degraded.add(decision)
        return decision

    def prepare(
        self,
        route: str | None,
        method: str | None,
        path: str | None,
        tenant: str | None,
        user: str | None,
        api_key: str | None,
        ip: str | None,
        cost: int | None = None,
    ) -> tuple[Engine, Prepared]:
        engine = self.engine()
        prepared = engine.prepare(
            route=route,
            method=method,
            path=path,
            tenant=tenant,
            user=user,
            api_key=api_key,
            ip=ip,
            now=self.rules_time(),
            cost=cost,
        )
        return engine, prepared

    def store_failed(
        self,
        engine: Engine,
        prepared: Prepared,
        exc: Exception,
        breaker: CircuitBreaker,
    ) -> Decision:
        """Record a Redis failure and decide by the route's failure mode."""
        was = breaker.state
        breaker.failed()
        if breaker.state is BreakerState.OPEN and was is not BreakerState.OPEN:
            logger.warning(
                "limiter.store_down: %s%s: %s; circuit open for %.2f s",
                f"node {breaker.node}: " if breaker.node else "",
                type(exc).__name__,
                exc,
                breaker.current_cooldown,
            )
        return self.fail(engine, prepared, f"{type(exc).__name__}: {exc}", breaker)

    def store_answered(self, breaker: CircuitBreaker) -> None:
        """Record a good call (the breaker judges failures against all calls)."""
        if breaker.state is not BreakerState.CLOSED:
            logger.info(
                "limiter.store_up: %sRedis answers again; circuit closed",
                f"node {breaker.node}: " if breaker.node else "",
            )
        breaker.succeeded()

    def fail(
        self, engine: Engine, prepared: Prepared, error: str, breaker: CircuitBreaker
    ) -> Decision:
        rejections = self.rejections
        decision = failover(
            engine,
            prepared,
            error=error,
            local=self.local,
            retry_after=breaker.retry_after(),
            slots=self.slots,
            owed=rejections.owed(prepared.keys, self.now()) if rejections.seen else (),
            at=self.store_time(),
            charges=self.charges,
        )
        if self.charges.pending:
            self.settle()
        return decision


class Limiter(LimiterCore):
    """Sync limiter over a Redis or Redis Cluster client (or a URL: see :func:`.bucket.connect`),
    or in memory (``"memory://"`` or a :class:`~.memory.MemoryStore`: one process only).

    ``rules`` is a :class:`~.source.SnapshotSource` (or any provider), or a fixed
    snapshot or bundle. ``unmatched`` is the failure mode of requests that match
    no route. ``wall`` is the gateway's own clock (epoch seconds), used for the
    rules' times only until Redis has told its time (:meth:`LimiterCore.rules_time`).
    Other options: see :class:`LimiterCore`.
    """

    def __init__(
        self,
        client: Client | str | MemoryStore,
        rules: SnapshotProvider | Snapshot | Bundle,
        *,
        timeout: float = DEFAULT_REDIS_TIMEOUT,
        **options: Unpack[CoreOptions],
    ) -> None:
        super().__init__(rules, **options)
        self.bucket: TokenBucket | MemoryScript
        self.hot: Script | MemoryScript
        self._release: Script | MemoryScript
        self._release_later: Script | MemoryScript
        self._charge: Script | MemoryScript
        if isinstance(client, str):
            client = memory_store(client) or connect(client, timeout=timeout)
        if isinstance(client, MemoryStore):  # the same scripts, in process
            self.time_told(client.time())  # its clock is the rules' clock: no I/O
            self.bucket, self.hot = client.script(SCRIPT), client.script(HOT)
            self._release = self._release_later = client.script(RELEASE)
            self._charge = client.script(CHARGE)
        else:
            self._on_redis(client)
        self.backlog = Backlog(
            self.orphans,
            self.charges,
            release=self._release_now,
            charge=self._charge_now,
        )

    def _on_redis(self, client: Client) -> None:
        self.watch_nodes(client)
        self.bucket = TokenBucket(client)
        self.hot = Script(client, HOT)
        self._release = Script(client, RELEASE)
        background = patient(client)
        self._release_later = Script(background, RELEASE)
        self._charge = Script(background, CHARGE)

    def decide(
        self,
        *,
        route: str | None = None,
        method: str | None = None,
        path: str | None = None,
        tenant: str | None = None,
        user: str | None = None,
        api_key: str | None = None,
        ip: str | None = None,
        cost: int | None = None,
    ) -> Decision:
        """Decide one request, by ``route`` slug or by ``method`` and ``path``
        (``path`` alone: the route when only one route has that path).

        Charges every limit of the winning policy or none. ``cost`` (tokens)
        replaces the route's cost when given; a limit's own cost still wins.
        Never raises for a Redis failure: the route's failure mode decides
        instead. A decision whose ``held`` is set holds concurrency slots:
        pass it to :meth:`release` when the response ends.
        """
        if self.needs_time:
            self.ask_time()
        engine, prepared = self.prepare(
            route, method, path, tenant, user, api_key, ip, cost
        )
        return self.record(tenant, self._decide(engine, prepared))

    def ask_time(self) -> None:
        """Ask Redis its time once, before the first decision (see :meth:`rules_time`)."""
        try:
            reply = self.bucket.client.time()
        except STORE_ERRORS as exc:
            logger.warning("limiter.time_unknown: %s: %s", type(exc).__name__, exc)
            reply = None
        self.time_told(reply)

    def _decide(self, engine: Engine, prepared: Prepared) -> Decision:
        if self.rejections.entries:
            cached = self.cached_rejection(engine, prepared)
            if cached is not None:
                return cached
        breaker = self.breaker_for(prepared)
        if not breaker.allow():
            return self.fail(engine, prepared, "circuit open", breaker)
        if prepared.plan.hot:
            return self._decide_hot(engine, prepared, breaker)
        rehearsal = prepared.rehearsal
        try:
            if rehearsal is None:
                reply = self.bucket(prepared.keys, prepared.plan.args)
            else:  # the same call: one round trip, one slot
                reply = self.bucket(prepared.keys + rehearsal.keys, rehearsal.plan.args)
        except STORE_ERRORS as exc:
            return self.store_failed(engine, prepared, exc, breaker)
        self.store_answered(breaker)
        return self.answered(engine, prepared, reply)

    def _decide_hot(
        self, engine: Engine, prepared: Prepared, breaker: CircuitBreaker
    ) -> Decision:
        call = self.hot_begin(engine, prepared)
        if not isinstance(call, HotCall):
            return call
        try:
            reply = self.hot(call.keys, call.args)
        except STORE_ERRORS as exc:
            return self.hot_failed(engine, prepared, call, exc, breaker)
        self.store_answered(breaker)
        self.observe(reply[-1])
        return self.hot_finish(engine, prepared, call, reply)

    def release(self, decision: Decision) -> None:
        """Give back the concurrency slots ``decision`` holds (nothing if it holds none).

        Call it once per decision (the middlewares do). Never raises for a
        Redis failure: the release is then retried in the background.
        """
        if decision.held is not None:
            self.release_held(decision.held)

    def release_held(self, held: Held) -> None:
        """Give back the slots ``held`` (a decision's ``held``, e.g. kept by a gateway)."""
        if held.local:
            self.slots.release(held.keys)
            return
        try:
            self._release(held.keys, [held.member.encode()])
        except STORE_ERRORS as exc:
            logger.warning("limiter.release_failed: %s: %s", type(exc).__name__, exc)
            self.orphaned(held.keys, held.member)

    def settle(self) -> None:
        self.backlog.wake()

    def _release_now(self, keys: tuple[str, ...], member: str) -> int:
        removed: int = self._release_later(keys, [member.encode()])
        return removed

    def _charge_now(self, owed: Charge) -> None:
        self._charge(owed.keys, charge_args(owed))
