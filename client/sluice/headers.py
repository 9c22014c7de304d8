"""A :class:`~.decision.Decision` as HTTP: status, RateLimit fields, Retry-After, JSON body.

Fields follow draft-ietf-httpapi-ratelimit-headers-10. Every enforcing limit of
the policy is one named quota policy (``<dimension>-<period unit>``, e.g.
``user-s``); the token bucket maps onto it as follows (``docs/enforcement.md``):

- ``q`` (RateLimit-Policy): the bucket's capacity, its burst, in requests of cost 1;
- ``w`` (RateLimit-Policy): whole seconds to refill the full bucket from empty,
  rounded up, so ``q / w`` is the sustained rate and never more;
- ``r`` (RateLimit): whole tokens left after this request;
- ``t`` (RateLimit): seconds, rounded up, until the bucket is full again; for a
  limit that rejected, until the request would fit (then equal to Retry-After,
  which the draft says must not come before ``t``).

A concurrency limit (``<dimension>-concurrent``) is a policy in the draft's
``concurrent-requests`` quota unit: ``q`` the most requests in flight and no
``w`` (there is no window); ``r`` the free slots, ``t`` 0 while one is free, else
the Retry-After hint.

Shadow limits are never advertised. A degraded decision (made without Redis)
carries ``Sluice-Degraded: <failure mode>`` (``open``, ``local``, ``closed``,
``open-unbounded``), and the RateLimit fields of the in-process buckets that
decided it, when any did (``open`` and ``local``): what this gateway knows, its
own share of the limit under ``local``. A limit
whose state is unknown (``remaining`` -1: an answer from the reject cache that
never saw it) is in ``RateLimit-Policy`` but left out of ``RateLimit``.

``X-RateLimit-Reset`` is an epoch time: the decision's time on Redis's clock
(``Decision.at``) plus the reset, never the gateway's own clock unless no
Redis reply was ever seen.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from .decision import Decision, LimitStatus
from .keys import MISSING
from .protocol import DEGRADED
from .quota import Dimension, public_description, public_name

__all__ = [
    "PROBLEM_QUOTA_EXCEEDED",
    "PROBLEM_REDUCED_CAPACITY",
    "Response",
    "error_response",
    "rate_limit_headers",
    "retry_after_seconds",
    "status_line",
]

PROBLEM_QUOTA_EXCEEDED = (
    "https://iana.org/assignments/http-problem-types#quota-exceeded"
)
PROBLEM_REDUCED_CAPACITY = (
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)


@dataclass(frozen=True, slots=True)
class Response:
    """A complete HTTP answer for a rejected request."""

    status: int  #: 429 or 503
    headers: list[tuple[str, str]]
    body: bytes  #: application/problem+json


def status_line(status: int) -> str:
    """``429 Too Many Requests``: the WSGI status string."""
    return f"{status} {HTTPStatus(status).phrase}"


def _advertised(decision: Decision) -> list[LimitStatus]:
    return [s for s in decision.statuses if not s.limit.shadow]


def _t(status: LimitStatus) -> int:
    return math.ceil(status.reset if status.fits else status.retry_after)


def _policy_item(status: LimitStatus) -> str:
    if status.concurrent:
        return f'"{status.name}";q={status.quota};qu="concurrent-requests"'
    return f'"{status.name}";q={status.quota};w={status.window}'


def rate_limit_headers(
    decision: Decision,
    *,
    github: bool = False,
    wall: Callable[[], float] = time.time,
) -> list[tuple[str, str]]:
    """``RateLimit-Policy`` and ``RateLimit`` (and ``X-RateLimit-*`` when ``github``),
    and ``Sluice-Degraded`` on a degraded decision.

    ``wall`` is used only for a decision that carries no Redis time (``at`` 0.0).
    """
    degraded = [(DEGRADED, decision.failure_mode or "")] if decision.degraded else []
    statuses = _advertised(decision)
    if not statuses:
        return degraded
    headers = [
        (
            "RateLimit-Policy",
            ", ".join(_policy_item(s) for s in statuses),
        ),
        (
            "RateLimit",
            ", ".join(
                f'"{s.name}";r={s.remaining};t={_t(s)}'
                for s in statuses
                if s.remaining >= 0
            ),
        ),
    ]
    deciding = decision.deciding
    if github and deciding is not None:
        headers += [
            ("X-RateLimit-Limit", str(deciding.quota)),
            ("X-RateLimit-Remaining", str(deciding.remaining)),
            (
                "X-RateLimit-Reset",
                str(math.ceil((decision.at or wall()) + deciding.reset)),
            ),
        ]
    return headers + degraded


def retry_after_seconds(
    decision: Decision,
    *,
    jitter: float = 0.0,
    rng: Callable[[], float] = random.random,
) -> int:
    """Whole seconds to wait, rounded up, at least 1, plus up to ``jitter`` seconds.

    Jitter spreads clients that were rejected together, so they do not all come
    back in the same second.
    """
    wait = decision.retry_after or 0.0
    return max(1, math.ceil(wait + jitter * rng()))


def error_response(
    decision: Decision,
    *,
    github: bool = False,
    jitter: float = 0.0,
    rng: Callable[[], float] = random.random,
    wall: Callable[[], float] = time.time,
) -> Response:
    """The 429 (rate limited) or 503 (limiter unavailable) answer to a rejected request."""
    seconds = retry_after_seconds(decision, jitter=jitter, rng=rng)
    headers = [
        ("Content-Type", "application/problem+json"),
        ("Retry-After", str(seconds)),
        *rate_limit_headers(decision, github=github, wall=wall),
    ]
    body = json.dumps(_problem(decision, seconds)).encode()
    return Response(decision.status, headers, body)


#: What a request that lacked a limit's subject is told: it shared one bucket.
_MISSING_SUBJECT = {
    Dimension.TENANT: "Requests that name no tenant share one bucket.",
    Dimension.USER: "Requests that carry no user id share one bucket.",
    Dimension.API_KEY: "Requests that carry no API key share one bucket.",
    Dimension.IP: "Requests whose address is unknown share one bucket.",
}
UNKNOWN_TENANT = (
    "The tenant named in the request is not known, so the default limits applied"
)


def _said(status: LimitStatus) -> str:
    """``Rate limit per user exceeded (2 requests per second per user, bursts of 5)``."""
    return f"{public_name(status.limit)} exceeded ({public_description(status.limit)})"


def _notes(decision: Decision) -> list[str]:
    """Plain words on how the caller was counted, when it was not as it may think."""
    notes = []
    for status in decision.violated:
        dimension = status.limit.dimension
        if f":{dimension.value}:{MISSING}:" in status.key:
            notes.append(_MISSING_SUBJECT[dimension])
    if decision.unknown_tenant:
        by_ip = any(s.limit.dimension is Dimension.IP for s in decision.violated)
        notes.append(
            UNKNOWN_TENANT
            + (": it was identified by its IP address only." if by_ip else ".")
        )
    return list(dict.fromkeys(notes))


def _problem(decision: Decision, seconds: int) -> dict[str, object]:
    """The problem+json body, with the plain ``error``/``message`` members as well.

    ``detail`` names each violated limit by its public name and description
    (``docs/enforcement.md``); ``limits`` lists them for programs.
    """
    violated = decision.violated
    if decision.status == 503:
        problem, code = PROBLEM_REDUCED_CAPACITY, "limiter_unavailable"
        message = f"The rate limiter is unavailable; retry in {seconds} s."
    else:
        problem = PROBLEM_QUOTA_EXCEEDED
        concurrent = any(s.concurrent for s in violated)
        code = "too_many_concurrent_requests" if concurrent else "rate_limited"
        said = ", ".join(_said(s) for s in violated) or "Rate limit exceeded"
        message = " ".join([f"{said}; retry in {seconds} s.", *_notes(decision)])
    body: dict[str, object] = {
        "type": problem,
        "title": HTTPStatus(decision.status).phrase,
        "status": decision.status,
        "detail": message,
        "error": code,
        "message": message,
        "retry_after_seconds": seconds,
        "violated-policies": [s.name for s in violated],
    }
    if decision.status != 503:  # the limiter's fault: no limit to tell of
        body["limits"] = [
            {
                "policy": s.name,
                "name": public_name(s.limit),
                "description": public_description(s.limit),
            }
            for s in violated
        ]
    if decision.unknown_tenant:
        body["unknown_tenant"] = True
    if decision.documentation:
        body["documentation"] = decision.documentation
    return body
