"""The decision service's one decision path, shared by its gRPC and HTTP faces.

A :class:`Decider` holds the client's own :class:`~sluice.aio.AsyncLimiter`
(same keys, scripts, failure modes, hot keys, concurrency limits and decision
events as an embedded client) and renders its decisions with
:mod:`sluice.headers`, so a gateway's client gets what a Python service's
client gets.

Concurrency limits: a gateway in front of the service does not say when a
request ends, unless it calls back. An admitted decision that holds slots
carries a release token (:func:`release_token`); the HTTP face returns it as
``Sluice-Release`` and frees the slots on ``POST /v1/release``. Slots that are
never released stop counting after the limit's ``timeout``, as those of a
crashed gateway do.

Deadlines: every call is decided in time for the gateway to get the answer.
A face gives :meth:`Decider.decide` a deadline (gRPC: half the time the
caller's ``grpc-timeout`` leaves, the other half is for the way back; HTTP: the
service's ``--budget``); a Redis call unanswered by then is given up and the
route's failure mode decides, and a call that arrives past it (a backlog: more
calls than the process decides in time) is shed the same way without asking
Redis. A call the gateway stopped waiting for anyway (cancelled, or answered
past its deadline) is recorded as :attr:`~sluice.decision.Outcome.GATEWAY_TIMEOUT`
instead of its decision: the gateway's own failure behaviour decided it, and
the dashboards count it; it is never logged one by one. A gateway that logs
what it decided itself to the service (``gateway_logs``: Envoy's access log,
:mod:`.accesslog`) has those calls recorded from its log alone
(:meth:`Decider.gateway_left`), so none is counted twice.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from sluice.aio import AsyncLimiter
from sluice.decision import Decision, Held, Outcome
from sluice.engine import Engine, Prepared
from sluice.failure import decided_by_gateway
from sluice.headers import Response, error_response, rate_limit_headers

from .request import Request

__all__ = ["Decider", "answer", "parse_release_token", "release_token"]

logger = logging.getLogger("sluice.service")

_MAX_TOKEN = 4096  #: characters of a release token; a policy has a few slot keys


def answer(
    decision: Decision, *, github: bool = False, jitter: float = 0.0
) -> Response:
    """The HTTP answer of ``decision``: 200 with RateLimit fields, or the 429 / 503."""
    if decision.allowed:
        return Response(200, rate_limit_headers(decision, github=github), b"")
    return error_response(decision, github=github, jitter=jitter)


def release_token(held: Held) -> str:
    """The slots ``held`` as an opaque token (the in-flight keys and the request id)."""
    raw = json.dumps([held.member, list(held.keys), held.local], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def parse_release_token(token: str) -> Held | None:
    """The slots a token names, or None when it is not one of :func:`release_token`'s."""
    if not token or len(token) > _MAX_TOKEN:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        member, keys, local = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        return None
    if not isinstance(member, str) or not isinstance(keys, list) or not keys:
        return None
    if not isinstance(local, bool) or len(keys) > 32:
        return None
    if not all(
        isinstance(k, str) and k.startswith("rl:{") and k.endswith(":inflight")
        for k in keys
    ):
        return None
    return Held(tuple(keys), member, local)


class Decider:
    """Decides requests with the client's limiter and renders the answers.

    ``github_headers`` adds ``X-RateLimit-*``; ``retry_jitter`` adds up to
    that many seconds to ``Retry-After`` (see :mod:`sluice.headers`);
    ``gateway_logs``: the gateways log the calls they stop waiting for to this
    service (``--gateway-logs``).
    """

    def __init__(
        self,
        limiter: AsyncLimiter,
        *,
        github_headers: bool = False,
        retry_jitter: float = 0.0,
        gateway_logs: bool = False,
    ) -> None:
        self.limiter = limiter
        self.gateway_logs = gateway_logs
        self.github_headers = github_headers
        self.retry_jitter = retry_jitter
        self.gave_up = 0  #: calls the gateway stopped waiting for, since the start
        self.in_flight = 0  #: calls being decided now

    async def decide(
        self, request: Request, *, deadline: float | None = None
    ) -> Decision:
        """The limiter's decision for ``request`` by ``deadline`` (``loop.time()``),
        not recorded yet: the face records it with :meth:`answered` once the
        gateway can still get it, or :meth:`stopped_waiting` (also when the
        call is cancelled: the gateway went away). Never raises for a Redis
        failure."""
        limiter = self.limiter
        if limiter.needs_time:
            await limiter.ask_time()
        engine, prepared = self.prepare(request)
        self.in_flight += 1
        try:
            return await limiter.decide_prepared(engine, prepared, deadline)
        finally:
            self.in_flight -= 1

    def prepare(self, request: Request) -> tuple[Engine, Prepared]:
        """The engine in force and ``request`` resolved by it (no Redis call)."""
        return self.limiter.prepare(
            request.route,
            request.method,
            request.path,
            request.tenant,
            request.user,
            request.api_key,
            request.ip,
            request.cost,
        )

    def answered(self, request: Request, decision: Decision) -> None:
        """Record ``decision``: the gateway gets it."""
        self.limiter.record(request.tenant, decision)

    def stopped_waiting(
        self, request: Request, decision: Decision | None = None
    ) -> None:
        """Record that the gateway stopped waiting for the decision of ``request``
        (``decision``, if one was made): its own failure behaviour answered, and
        count it."""
        self.gave_up += 1
        limiter = self.limiter
        if decision is None:
            engine, prepared = self.prepare(request)
            gateway = decided_by_gateway(engine, prepared, at=limiter.store_time())
        else:
            gateway = decision._replace(
                outcome=Outcome.GATEWAY_TIMEOUT, error="the gateway stopped waiting"
            )
        limiter.record(request.tenant, gateway)

    def gateway_left(
        self,
        request: Request,
        decision: Decision | None = None,
        *,
        envoy: bool = True,
    ) -> None:
        """A face saw the gateway stop waiting for ``request``: recorded
        (:meth:`stopped_waiting`), unless the gateway is an Envoy (``envoy``:
        an RLS call, an ext_authz check) and Envoys log such calls to the
        service (``gateway_logs``), whose log then records it, once."""
        if not (envoy and self.gateway_logs):
            self.stopped_waiting(request, decision)

    def answer(self, decision: Decision) -> Response:
        """See :func:`answer`, with this service's header options."""
        return answer(decision, github=self.github_headers, jitter=self.retry_jitter)

    async def release(self, token: str) -> bool:
        """Free the slots of a release token; False when the token is not one."""
        held = parse_release_token(token)
        if held is None:
            logger.warning("service.bad_release: not a release token: %.60r", token)
            return False
        await self.limiter.release_held(held)
        return True
