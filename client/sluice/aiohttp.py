"""aiohttp middleware: every request decided before its handler.

::

    from aiohttp import web
    from sluice.aiohttp import rate_limit_middleware

    app = web.Application(middlewares=[rate_limit_middleware(limiter)])

``limiter`` is an :class:`~.aio.AsyncLimiter`. Requests are matched to their
Sluice route by method and path; a handler marked with :func:`limit` is
decided as the route and cost it names instead. A rejected request is
answered here (429, or 503 when its route fails closed); an admitted one gets
the RateLimit fields (unless its handler sent its headers itself, a
``StreamResponse``). The decision is ``request[DECISION]``;
concurrency slots are released when the handler returns or raises.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from .aio import AsyncLimiter
from .decision import Decision
from .headers import error_response, rate_limit_headers
from .identity import Identity, TrustedProxies, client_ip

__all__ = ["DECISION", "limit", "rate_limit_middleware"]

Identify = Callable[[web.Request], Identity | Awaitable[Identity]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_Handler = TypeVar("_Handler", bound=Callable[..., Any])
_LIMIT = "_sluice_limit"
#: The key of the request's decision: ``request[DECISION]`` (a typed key where the
#: installed aiohttp has them, 3.12 and later; the string ``"sluice.decision"`` before)
DECISION: Any = (
    web.RequestKey("sluice.decision", Decision)
    if hasattr(web, "RequestKey")
    else "sluice.decision"
)


def limit(
    route: str | None = None, *, cost: int | None = None
) -> Callable[[_Handler], _Handler]:
    """Decide a handler's requests as Sluice route ``route``, at ``cost`` tokens."""

    def mark(handler: _Handler) -> _Handler:
        setattr(handler, _LIMIT, (route, cost))
        return handler

    return mark


def rate_limit_middleware(
    limiter: AsyncLimiter,
    *,
    identify: Identify | None = None,
    trusted_proxies: Iterable[str] = (),
    github_headers: bool = False,
    retry_jitter: float = 0.0,
) -> Any:
    """The middleware; options as in :class:`sluice.asgi.RateLimitMiddleware`
    (``identify(request)`` may be a coroutine function)."""
    who_is: Identify = identify or (lambda request: Identity())
    trusted = TrustedProxies(trusted_proxies)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        found = who_is(request)
        who = await found if inspect.isawaitable(found) else found
        route, cost = getattr(handler, _LIMIT, (None, None))
        decision = await limiter.decide(
            route=route,
            method=request.method,
            path=request.path,
            tenant=who.tenant,
            user=who.user,
            api_key=who.api_key,
            ip=client_ip(
                request.remote, request.headers.get("X-Forwarded-For"), trusted
            ),
            cost=cost,
        )
        request[DECISION] = decision
        if not decision.allowed:
            answer = error_response(
                decision, github=github_headers, jitter=retry_jitter
            )
            return web.Response(
                body=answer.body, status=answer.status, headers=dict(answer.headers)
            )
        try:
            response = await handler(request)
        finally:
            await limiter.release(decision)
        if not response.prepared:
            response.headers.update(rate_limit_headers(decision, github=github_headers))
        return response

    return middleware
