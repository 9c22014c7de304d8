"""FastAPI (and Starlette) adapter: a dependency per route, with its own Sluice route and cost.

::

    from fastapi import Depends, FastAPI
    from sluice.fastapi import RateLimit, add_rate_limit_handler

    app = FastAPI()
    add_rate_limit_handler(app)            # 429 / 503 as problem+json, with Retry-After
    search_limit = RateLimit(limiter)      # the route matched by method and path

    @app.get("/v1/search", dependencies=[Depends(search_limit)])
    async def search(q: str): ...

    @app.post("/v1/reports", dependencies=[Depends(RateLimit(limiter, route="reports.run", cost=5))])
    async def run_report(): ...

``limiter`` is an :class:`~.aio.AsyncLimiter` (``AsyncLimiter("memory://", rules)``
in tests). An admitted request's response gets the RateLimit fields; a rejected
one raises :class:`RateLimited`, which :func:`add_rate_limit_handler` renders as
the middlewares do. Concurrency slots are held until the request's
dependencies are closed. For every route at once, wrap the app in
:class:`sluice.asgi.RateLimitMiddleware` instead.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from fastapi import FastAPI, Request, Response

from .aio import AsyncLimiter
from .decision import Decision
from .headers import error_response, rate_limit_headers
from .identity import Identity, TrustedProxies, client_ip

__all__ = ["RateLimit", "RateLimited", "add_rate_limit_handler"]

Identify = Callable[[Request], Identity | Awaitable[Identity]]


class RateLimited(Exception):
    """A request Sluice refused (429, or 503 when its route fails closed)."""

    def __init__(self, decision: Decision, *, github: bool, jitter: float) -> None:
        super().__init__(f"{decision.status}: {decision.route or 'no route'}")
        self.decision = decision
        self.response = error_response(decision, github=github, jitter=jitter)


class RateLimit:
    """A dependency deciding the request with ``limiter``; yields the :class:`~.decision.Decision`.

    ``route``: the Sluice route slug (None: matched by method and path);
    ``cost``: tokens per request (None: the route's). Other options as in
    :class:`sluice.asgi.RateLimitMiddleware`; ``identify(request)`` may be a
    coroutine function.
    """

    def __init__(
        self,
        limiter: AsyncLimiter,
        *,
        route: str | None = None,
        cost: int | None = None,
        identify: Identify | None = None,
        trusted_proxies: Iterable[str] = (),
        github_headers: bool = False,
        retry_jitter: float = 0.0,
    ) -> None:
        self.limiter = limiter
        self.route = route
        self.cost = cost
        self.identify: Identify = identify or (lambda request: Identity())
        self.trusted_proxies = TrustedProxies(trusted_proxies)
        self.github_headers = github_headers
        self.retry_jitter = retry_jitter

    async def __call__(
        self, request: Request, response: Response
    ) -> AsyncIterator[Decision]:
        found = self.identify(request)
        who = await found if inspect.isawaitable(found) else found
        peer = request.client.host if request.client else None
        decision = await self.limiter.decide(
            route=self.route,
            method=request.method,
            path=request.url.path,
            tenant=who.tenant,
            user=who.user,
            api_key=who.api_key,
            ip=client_ip(
                peer, request.headers.get("x-forwarded-for"), self.trusted_proxies
            ),
            cost=self.cost,
        )
        request.state.sluice_decision = decision
        if not decision.allowed:
            raise RateLimited(
                decision, github=self.github_headers, jitter=self.retry_jitter
            )
        for name, value in rate_limit_headers(decision, github=self.github_headers):
            response.headers[name] = value
        try:
            yield decision
        finally:
            await self.limiter.release(decision)


async def _rejected(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RateLimited)
    answer = exc.response
    return Response(
        answer.body, status_code=answer.status, headers=dict(answer.headers)
    )


def add_rate_limit_handler(app: FastAPI) -> None:
    """Answer :class:`RateLimited` as the middlewares answer a rejection."""
    app.add_exception_handler(RateLimited, _rejected)
