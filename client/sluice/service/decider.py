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
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from sluice.aio import AsyncLimiter
from sluice.decision import Decision, Held
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
    that many seconds to ``Retry-After`` (see :mod:`sluice.headers`).
    """

    def __init__(
        self,
        limiter: AsyncLimiter,
        *,
        github_headers: bool = False,
        retry_jitter: float = 0.0,
    ) -> None:
        self.limiter = limiter
        self.github_headers = github_headers
        self.retry_jitter = retry_jitter

    async def decide(self, request: Request) -> Decision:
        """The limiter's decision for ``request`` (never raises for a Redis failure)."""
        return await self.limiter.decide(
            route=request.route,
            method=request.method,
            path=request.path,
            tenant=request.tenant,
            user=request.user,
            api_key=request.api_key,
            ip=request.ip,
            cost=request.cost,
        )

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
