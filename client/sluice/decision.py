"""The answer of the limiter: a :class:`Decision` and the state of each limit behind it.

:mod:`.headers` renders a decision to HTTP; nothing else recomputes it.

Both are typed ``NamedTuple`` values (like ``limits.WindowStats``), not frozen
dataclasses: every request builds one decision and a status per limit, and on
these machines a frozen dataclass costs ~2 µs more to build than a tuple
(``docs/benchmarks.md``). They are just as immutable and carry no ``__dict__``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from .quota import ConcurrencyLimit, RateLimit
from .rehearsal import Rehearsed
from .rules import Policy

__all__ = ["Decision", "Held", "LimitStatus", "Outcome"]


class Outcome(StrEnum):
    """What happened to a request, as decision events and dashboards count it."""

    ALLOWED = "allowed"  #: every limit admitted
    LIMITED = "limited"  #: a limit rejected: 429
    SHADOW_LIMITED = (
        "shadow_limited"  #: admitted, but a shadow limit would have rejected
    )
    FAIL_OPEN = (
        "fail_open"  #: the store failed and the route fails open: admitted unchecked
    )
    FAIL_CLOSED = "fail_closed"  #: the store failed and the route fails closed: 503
    LOCAL = "local"  #: the store failed and an in-process bucket decided
    #: the gateway stopped waiting for the decision service (its timer fired, or
    #: the answer came too late): the gateway's own failure behaviour decided
    GATEWAY_TIMEOUT = "gateway_timeout"


class LimitStatus(NamedTuple):
    """One limit of the policy after the decision: its bucket (or slot set) and what it said.

    For a concurrency limit, ``quota`` is the most requests in flight,
    ``remaining`` the free slots after the decision, ``window`` and ``reset`` 0.
    """

    limit: RateLimit | ConcurrencyLimit  #: the limit as published in the snapshot
    name: str  #: its policy name in headers, e.g. ``user-s``
    key: str  #: the Redis key of its bucket
    quota: int  #: the bucket's capacity in tokens (the burst): IETF ``q``
    window: int  #: whole seconds to refill the full bucket from empty: IETF ``w``
    fits: bool  #: whether this limit admitted the request
    #: whole tokens left in the bucket after the decision; -1 when unknown (an
    #: answer from the reject cache about a limit it never saw)
    remaining: int
    reset: float  #: seconds until the bucket is full again
    retry_after: float  #: seconds until the request would fit; 0.0 when it fits

    @property
    def concurrent(self) -> bool:
        """Whether this is a concurrency limit (requests in flight), not a bucket."""
        return isinstance(self.limit, ConcurrencyLimit)


class Held(NamedTuple):
    """Concurrency slots an admitted request holds until :meth:`Limiter.release`."""

    keys: tuple[str, ...]  #: the in-flight sets it joined
    member: str  #: its request id in them
    local: bool = False  #: held in process (the ``local`` failure mode), not in Redis


class Decision(NamedTuple):
    """Whether to serve a request, which limit decided, and what to tell the client.

    ``limit``, ``remaining`` and ``reset`` describe the deciding limit: the one
    that rejected (the longest wait first) or, when admitted, the one closest to
    rejecting. A degraded decision was made without Redis (see :mod:`.failure`).
    """

    allowed: bool  #: serve the request
    status: int  #: 200 when allowed, 429 rate limited, 503 limiter unavailable
    outcome: Outcome
    deciding: LimitStatus | None  #: the deciding limit; None when no bucket decided
    limit: int  #: the deciding limit's quota (burst); 0 when none decided
    remaining: int  #: tokens left in the deciding limit's bucket
    reset: float  #: seconds until the deciding limit's bucket is full again
    retry_after: float | None  #: seconds to wait; None when allowed
    policy: Policy  #: the policy whose limits applied
    snapshot_version: int  #: the snapshot that policy came from
    route: str | None  #: the matched route slug; None when no route matched
    statuses: tuple[
        LimitStatus, ...
    ]  #: every limit of the policy, shadow ones included
    shadow: bool = False  #: a shadow limit would have rejected this request
    degraded: bool = False  #: decided without Redis (open, closed or local)
    fail_open: bool = False  #: admitted unchecked because the store failed
    error: str | None = None  #: why the store was not used, for logs
    held: Held | None = None  #: concurrency slots to release when the response ends
    #: epoch seconds of the decision on the store's clock (Redis ``TIME``): read
    #: from the reply, or estimated from the last reply when decided in process;
    #: 0.0 when no Redis reply was ever seen (then readers use their own clock)
    at: float = 0.0
    #: what the rehearsed scheduled version would have answered (:mod:`.rehearsal`);
    #: None when nothing was rehearsed. Never rendered in headers.
    rehearsed: Rehearsed | None = None
    #: the failure mode that decided a degraded decision (``open``, ``local``,
    #: ``closed``, ``open-unbounded``: the ``Sluice-Degraded`` field); None otherwise
    failure_mode: str | None = None
    #: the request named a tenant the snapshot does not know: the default policy
    #: decided, counting it as anonymous traffic (said in the 429)
    unknown_tenant: bool = False
    #: the snapshot's documentation link (``Rules.documentation``), for the 429
    documentation: str = ""
    #: the cost the request declared when the route's rules did not take it as is
    #: (above its ``max_cost``, or a route that takes none): the request was
    #: decided at ``max_cost`` or the route's cost. None: taken, or none declared
    declared_cost: int | None = None

    @property
    def violated(self) -> tuple[LimitStatus, ...]:
        """The enforcing limits that rejected the request (empty when allowed)."""
        return tuple(s for s in self.statuses if not s.fits and not s.limit.shadow)
