"""WSGI middleware: decide every request before the application sees it.

Wraps an application the way whitenoise does::

    application = RateLimitMiddleware(application, limiter, identify=who, trusted_proxies=["10.0.0.0/8"])

A rejected request is answered here (429, or 503 when the limiter fails
closed) and never reaches the application; an admitted one gets the
RateLimit fields added to the application's response. An admitted request
that holds concurrency slots releases them when the server closes the
response body (after the last byte, streaming included) or when the
application raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from .closing import ClosingIterator
from .decision import Decision
from .headers import error_response, rate_limit_headers, status_line
from .identity import Identity, TrustedProxies, client_ip
from .limiter import Limiter

__all__ = ["RateLimitMiddleware"]

Environ = dict[str, Any]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


class RateLimitMiddleware:
    """Rate-limit a WSGI application with a sync :class:`~.limiter.Limiter`.

    ``identify(environ)`` returns the caller's :class:`~.identity.Identity`
    (tenant, user, API key); the client IP comes from ``REMOTE_ADDR``, or from
    ``X-Forwarded-For`` when the peer is one of ``trusted_proxies``.
    ``github_headers`` adds ``X-RateLimit-*``; ``retry_jitter`` adds up to that
    many seconds to ``Retry-After``.
    """

    def __init__(
        self,
        application: WSGIApp,
        limiter: Limiter,
        *,
        identify: Callable[[Environ], Identity] | None = None,
        trusted_proxies: Iterable[str] = (),
        github_headers: bool = False,
        retry_jitter: float = 0.0,
    ) -> None:
        self.application = application
        self.limiter = limiter
        self.identify = identify or (lambda environ: Identity())
        self.trusted_proxies = TrustedProxies(trusted_proxies)
        self.github_headers = github_headers
        self.retry_jitter = retry_jitter

    def decide(self, environ: Environ) -> Decision:
        """The decision for one request (also stored as ``environ["sluice.decision"]``)."""
        who = self.identify(environ)
        decision = self.limiter.decide(
            method=environ.get("REQUEST_METHOD", "GET"),
            path=environ.get("PATH_INFO") or "/",
            tenant=who.tenant,
            user=who.user,
            api_key=who.api_key,
            ip=client_ip(
                environ.get("REMOTE_ADDR"),
                environ.get("HTTP_X_FORWARDED_FOR"),
                self.trusted_proxies,
            ),
        )
        environ["sluice.decision"] = decision
        return decision

    def __call__(
        self, environ: Environ, start_response: StartResponse
    ) -> Iterable[bytes]:
        decision = self.decide(environ)
        if not decision.allowed:
            response = error_response(
                decision, github=self.github_headers, jitter=self.retry_jitter
            )
            headers = [*response.headers, ("Content-Length", str(len(response.body)))]
            start_response(status_line(response.status), headers)
            return [response.body]
        extra = rate_limit_headers(decision, github=self.github_headers)

        def start_with_headers(
            status: str, headers: list[tuple[str, str]], exc_info: ExcInfo | None = None
        ) -> Callable[[bytes], object]:
            return start_response(status, [*headers, *extra], exc_info)

        if decision.held is None:
            return self.application(environ, start_with_headers)
        try:
            body = self.application(environ, start_with_headers)
        except BaseException:
            self.limiter.release(decision)
            raise
        return ClosingIterator(body, lambda: self.limiter.release(decision))
