"""Envoy's rate-limit service (RLS v3) over ``grpc.aio``: descriptors in, a Sluice decision out.

``envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``. The entries
of every descriptor are merged into one request (:func:`.request.from_descriptors`,
keys from :class:`~.request.DescriptorKeys`), decided once by the client's
limiter, and answered (``docs/gateways/envoy.md``):

- ``overall_code``: ``OK`` when admitted (shadow limits never reject),
  ``OVER_LIMIT`` for a 429, and for a route that fails closed while Redis is
  down (the middlewares' 503): then ``dynamic_metadata`` carries
  ``{"status": 503}``, which ``envoy.yaml``'s ``local_reply_config`` turns into
  a 503;
- one status per descriptor: the limit of the dimension the descriptor names
  (its tightest, for several), else the deciding one: ``current_limit`` (rate
  in the unit closest to its period), ``limit_remaining``,
  ``duration_until_reset``; a degraded decision gives codes only;
- ``response_headers_to_add``: the ``RateLimit`` / ``RateLimit-Policy``
  fields (and ``X-RateLimit-*``), plus ``Retry-After`` and ``Content-Type``
  on a rejection, whose ``raw_body`` is the problem+json body.

Bad input is decided (:mod:`.request`); a message that is not a
``RateLimitRequest`` at all is decided as an empty one (:func:`parse_request`).
A request with a path and no method matches the one route of that path; a
path that several routes share (by method) matches none, and the service says
so once per gateway (:meth:`RateLimitService.method_missing`).
A request the service cannot decide (a bug) gets gRPC ``UNAVAILABLE``, so
Envoy applies its ``failure_mode_deny``, as when the service is down.

Deadlines (:mod:`.decider`): a call is decided within :data:`ANSWER_SHARE` of
the time its ``grpc-timeout`` leaves (Envoy sends its filter's ``timeout``), so
the route's failure mode answers before Envoy's timer fires and the decision is
Sluice's, in the decision events. A call Envoy gave up on anyway is recorded
as ``gateway_timeout`` once it ends, not logged; with ``--gateway-logs`` it is
left to Envoy's access log (:meth:`.Decider.gateway_left`), which also holds
the calls the service never saw (:mod:`.accesslog`; every answer carries its
marker in ``dynamic_metadata``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any
from urllib.parse import unquote

import grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import duration_pb2, struct_pb2
from google.protobuf.message import DecodeError

from sluice.decision import Decision, LimitStatus, Outcome
from sluice.quota import CalendarQuota, ConcurrencyLimit, Dimension, SlidingWindow
from sluice.rules import Route

from .accesslog import MARKER
from .decider import Decider
from .request import DescriptorKeys, Request, bad_input, from_descriptors

__all__ = [
    "ANSWER_SHARE",
    "RateLimitService",
    "add_to_server",
    "closest_unit",
    "parse_request",
]

logger = logging.getLogger("sluice.service")
_GRPC_LOG = logging.getLogger("grpc._cython.cygrpc")  #: where grpc.aio's server logs

_DECIDED = struct_pb2.Struct()
_DECIDED.update({MARKER: True})  #: every answer's mark: Sluice decided this request

#: The share of the time a call's deadline leaves that its decision may take; the
#: rest is for the answer's way back through a busy process and the gateway.
ANSWER_SHARE = 0.5

_Response = rls_pb2.RateLimitResponse
_Unit = _Response.RateLimit
_UNITS = (  # seconds per unit, Envoy's enum value
    (1, _Unit.SECOND),
    (60, _Unit.MINUTE),
    (3600, _Unit.HOUR),
    (86400, _Unit.DAY),
    (7 * 86400, _Unit.WEEK),
    (30 * 86400, _Unit.MONTH),
    (365 * 86400, _Unit.YEAR),
)
_MAX_TOLD = 1024  #: gateways told about a missing method; past it, no more lines
_FIELD_OF = {
    Dimension.TENANT: "tenant",
    Dimension.USER: "user",
    Dimension.API_KEY: "api_key",
    Dimension.IP: "ip",
}


def _slug(route: Route) -> str:
    return route.slug


@functools.lru_cache(maxsize=1024)
def closest_unit(rate: int, period: int) -> tuple[int, int]:
    """``(requests_per_unit, unit)``: ``rate`` per ``period`` s in the nearest Envoy unit."""
    seconds, unit = min(_UNITS, key=lambda u: abs(u[0] - period) / u[0])
    return max(1, round(rate * seconds / period)), unit


class RateLimitService(rls_pb2_grpc.RateLimitServiceServicer):  # type: ignore[misc]
    """The ``ShouldRateLimit`` handler over a :class:`~.decider.Decider`."""

    def __init__(
        self,
        decider: Decider,
        *,
        keys: DescriptorKeys | None = None,
    ) -> None:
        self.decider = decider
        self.keys = keys = keys or DescriptorKeys()
        self._dimension_keys = {
            dim: getattr(keys, name) for dim, name in _FIELD_OF.items()
        }
        self._told: set[tuple[str, str, tuple[str, ...]]] = set()

    async def ShouldRateLimit(  # the gRPC method's name
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Any:
        try:
            descriptors = [
                [(e.key, e.value) for e in d.entries] for d in request.descriptors
            ]
            hits = [
                d.hits_addend.value
                for d in request.descriptors
                if d.HasField("hits_addend")
            ]
            asked = from_descriptors(
                descriptors,
                keys=self.keys,
                hits_addend=request.hits_addend,
                descriptor_hits=hits,
            )
            remaining = context.time_remaining()
            deadline = None
            if remaining is not None:
                now = asyncio.get_running_loop().time()
                deadline = now + remaining * ANSWER_SHARE
            try:
                decision = await self.decider.decide(asked, deadline=deadline)
            except asyncio.CancelledError:  # Envoy went away
                self.decider.gateway_left(asked)
                raise
            if remaining is not None and context.time_remaining() <= 0:
                # too late for the gateway, which answered by its own failure mode
                self.decider.gateway_left(asked, decision)
                raise asyncio.CancelledError
            # recorded once the call ends: only then is it known whether the
            # answer reached the gateway in time
            context.add_done_callback(lambda ended: self._ended(ended, asked, decision))
            if (
                decision.route is None
                and asked.path
                and not (asked.method or asked.route)
            ):
                self.method_missing(request.domain, context, descriptors, asked.path)
            return self.response(decision, descriptors)
        except asyncio.CancelledError:  # recorded as the gateway's decision
            raise
        except Exception:  # a bug must cost one answer, not the gateway's connection
            logger.exception("service.rls_failed")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "sluice: decision failed")
            raise  # abort raises; this line is never reached

    def _ended(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        asked: Request,
        decision: Decision,
    ) -> None:
        if context.cancelled():
            self.decider.gateway_left(asked, decision)
        else:
            self.decider.answered(asked, decision)

    def method_missing(
        self,
        domain: str,
        context: grpc.aio.ServicerContext[Any, Any],
        descriptors: list[list[tuple[str, str]]],
        path: str,
    ) -> None:
        """Log, once per gateway, that ``path`` came without a method and several
        routes share it, so it matched no route.

        A gateway is its address, its RLS domain and the descriptor keys it
        sends: one line per configuration, not per request.
        """
        # "ipv4:10.0.0.7:40112", "ipv6:%5B::1%5D:40112": the address, not the port
        address = unquote(context.peer().rpartition(":")[0].partition(":")[2])
        keys = tuple(sorted({key for entries in descriptors for key, _ in entries}))
        gateway = (domain, address, keys)
        if gateway in self._told or len(self._told) >= _MAX_TOLD:
            return
        routes = self.decider.limiter.engine().resolver.routes.candidates(path)
        if len(routes) < 2:  # no route has this path: unmatched with a method too
            return
        self._told.add(gateway)
        logger.warning(
            "service.missing_descriptor: %s: %s (domain %r, descriptor keys %s) sends "
            "no %r entry, and %d routes share the path %s (%s): decided as matching "
            "no route. Send the request's :method under the key %r "
            "(docs/gateways/envoy.md)",
            self.keys.method,
            gateway[1],
            domain,
            ", ".join(keys)[:200],
            self.keys.method,
            len(routes),
            path,
            ", ".join(
                f"{r.slug} {'/'.join(r.methods)}" for r in sorted(routes, key=_slug)
            ),
            self.keys.method,
        )

    def response(
        self, decision: Decision, descriptors: list[list[tuple[str, str]]]
    ) -> Any:
        """The RLS answer to ``decision`` for a request of ``descriptors``."""
        rendered = self.decider.answer(decision)
        over = not decision.allowed
        reply = _Response(
            overall_code=_Response.OVER_LIMIT if over else _Response.OK,
            statuses=[self._status(decision, d) for d in descriptors],
        )
        header = reply.response_headers_to_add.add
        for name, value in rendered.headers:
            header(key=name, value=value)
        if over:
            reply.raw_body = rendered.body
        if decision.outcome is Outcome.FAIL_CLOSED:
            metadata = struct_pb2.Struct()
            metadata.update(
                {MARKER: True, "status": rendered.status, "outcome": "fail_closed"}
            )
            reply.dynamic_metadata.CopyFrom(metadata)
        else:
            reply.dynamic_metadata.CopyFrom(_DECIDED)
        return reply

    def _status(self, decision: Decision, descriptor: list[tuple[str, str]]) -> Any:
        status = self._status_for(decision, {key for key, _ in descriptor})
        if status is None or decision.degraded:
            code = _Response.OK if decision.allowed else _Response.OVER_LIMIT
            return _Response.DescriptorStatus(code=code)
        code = _Response.OK if status.fits else _Response.OVER_LIMIT
        limit = status.limit
        if isinstance(limit, ConcurrencyLimit):  # no rate: slots free, no window
            return _Response.DescriptorStatus(
                code=code, limit_remaining=status.remaining
            )
        if isinstance(limit, CalendarQuota):  # its calendar unit, not the nearest
            per_unit = limit.limit
            unit = _Unit.DAY if limit.per == "day" else _Unit.MONTH
        elif isinstance(limit, SlidingWindow):
            per_unit, unit = closest_unit(limit.limit, limit.window)
        else:
            per_unit, unit = closest_unit(limit.rate, limit.period)
        millis = round(1000 * (status.reset if status.fits else status.retry_after))
        return _Response.DescriptorStatus(
            code=code,
            current_limit=_Unit(
                name=status.name, requests_per_unit=per_unit, unit=unit
            ),
            limit_remaining=status.remaining,
            # Duration.FromMilliseconds, for a duration that is never negative
            duration_until_reset=duration_pb2.Duration(
                seconds=millis // 1000, nanos=millis % 1000 * 1_000_000
            ),
        )

    def _status_for(self, decision: Decision, keys: set[str]) -> LimitStatus | None:
        """The tightest advertised limit of a dimension the descriptor names, else the deciding one."""
        named = [
            s
            for s in decision.statuses
            if not s.limit.shadow and self._dimension_keys[s.limit.dimension] in keys
        ]
        if not named:
            return decision.deciding
        return min(named, key=lambda s: (s.fits, s.remaining, -s.retry_after))


def parse_request(raw: bytes) -> Any:
    """A ``RateLimitRequest`` from the wire; an empty one (and a log line) when unreadable.

    An empty request is decided like any other: anonymous, no route, so the
    all-routes policies' shared buckets apply; the gateway gets an answer.
    """
    try:
        return rls_pb2.RateLimitRequest.FromString(raw)
    except DecodeError as exc:
        bad_input("malformed_request", f"{len(raw)} bytes: {exc}"[:200])
        return rls_pb2.RateLimitRequest()


class _AnswerTooLate(logging.Filter):
    """Counts, instead of logging, grpc's traceback for an answer sent to a call
    that had already ended.

    The gateway can give up between the handler's last look at the deadline
    and the send: grpc then fails the send and logs the error itself
    (``ExecuteBatchError raised in core by servicer method``, with a
    traceback), out of the handler's reach. The decision is in the events
    already; the call is counted with those the gateway gave up on.
    """

    def __init__(self, decider: Decider) -> None:
        super().__init__()
        self.decider = decider

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        # by name: the class lives in grpc's private Cython module
        if type(error).__name__ == "ExecuteBatchError":
            self.decider.gave_up += 1
            return False
        return True


def add_to_server(server: grpc.aio.Server, service: RateLimitService) -> None:
    """Register ``service`` on a ``grpc.aio`` server (requests read by :func:`parse_request`)."""
    _GRPC_LOG.addFilter(_AnswerTooLate(service.decider))
    handler = grpc.unary_unary_rpc_method_handler(
        service.ShouldRateLimit,
        request_deserializer=parse_request,
        response_serializer=_Response.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "envoy.service.ratelimit.v3.RateLimitService",
                {"ShouldRateLimit": handler},
            ),
        )
    )
