"""ASGI middleware: the asyncio twin of :mod:`.wsgi`, over :class:`~.aio.AsyncLimiter`.

::

    app = RateLimitMiddleware(app, limiter, identify=who, trusted_proxies=["10.0.0.0/8"])

Only ``http`` scopes are limited; ``lifespan`` and ``websocket`` pass through.
Concurrency slots are released when the application returns (its last body
message sent, streaming included) or raises.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from .aio import AsyncLimiter
from .decision import Decision
from .headers import error_response, rate_limit_headers
from .identity import Identity, TrustedProxies, client_ip

__all__ = ["RateLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Identify = Callable[[Scope], Identity | Awaitable[Identity]]


class RateLimitMiddleware:
    """Rate-limit an ASGI application; same options as :class:`.wsgi.RateLimitMiddleware`.

    ``identify(scope)`` may be a plain function or a coroutine function.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: AsyncLimiter,
        *,
        identify: Identify | None = None,
        trusted_proxies: Iterable[str] = (),
        github_headers: bool = False,
        retry_jitter: float = 0.0,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.identify: Identify = identify or (lambda scope: Identity())
        self.trusted_proxies = TrustedProxies(trusted_proxies)
        self.github_headers = github_headers
        self.retry_jitter = retry_jitter

    async def decide(self, scope: Scope) -> Decision:
        """The decision for one request (also stored in ``scope["state"]["sluice.decision"]``)."""
        found = self.identify(scope)
        who = await found if inspect.isawaitable(found) else found
        headers = dict(scope.get("headers") or ())
        forwarded = headers.get(b"x-forwarded-for")
        peer = scope.get("client")
        decision = await self.limiter.decide(
            method=scope.get("method", "GET"),
            path=scope.get("path") or "/",
            tenant=who.tenant,
            user=who.user,
            api_key=who.api_key,
            ip=client_ip(
                peer[0] if peer else None,
                forwarded.decode("latin-1") if forwarded else None,
                self.trusted_proxies,
            ),
        )
        scope.setdefault("state", {})["sluice.decision"] = decision
        return decision

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        decision = await self.decide(scope)
        if not decision.allowed:
            await self._reject(decision, send)
            return
        extra = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in rate_limit_headers(decision, github=self.github_headers)
        ]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        if decision.held is None:
            await self.app(scope, receive, send_with_headers)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            await self.limiter.release(decision)

    async def _reject(self, decision: Decision, send: Send) -> None:
        response = error_response(
            decision, github=self.github_headers, jitter=self.retry_jitter
        )
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in [
                *response.headers,
                ("Content-Length", str(len(response.body))),
            ]
        ]
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": headers,
            }
        )
        await send({"type": "http.response.body", "body": response.body})
