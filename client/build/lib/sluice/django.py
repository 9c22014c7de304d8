"""Django middleware: the only module of ``sluice`` that imports Django.

Add ``"sluice.django.RateLimitMiddleware"`` to ``MIDDLEWARE`` and set:

- ``SLUICE_LIMITER``: a :class:`~.limiter.Limiter`, or the dotted path of one or of a
  function without arguments that returns one (called once, when Django loads
  its middleware);
- ``SLUICE_IDENTIFY`` (optional): the dotted path of ``identify(request) -> Identity``;
- ``SLUICE_TRUSTED_PROXIES`` (optional): proxy addresses or networks whose
  ``X-Forwarded-For`` is believed;
- ``SLUICE_GITHUB_HEADERS``, ``SLUICE_RETRY_JITTER`` (optional): as in :mod:`.wsgi`.

The middleware is synchronous; Django runs it in a thread under ASGI. The
decision is stored as ``request.sluice_decision``. Concurrency slots are
released when the view returns or raises, or, for a streaming response, when
Django closes it after the last chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Django ships no type information (django-stubs is not a dependency of the client).
from django.conf import settings  # type: ignore[import-untyped]
from django.http import HttpRequest, HttpResponse  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

from .closing import AsyncClosingIterator, ClosingIterator
from .decision import Decision
from .headers import error_response, rate_limit_headers
from .identity import Identity, TrustedProxies, client_ip
from .limiter import Limiter

__all__ = ["RateLimitMiddleware"]


def _load(value: Any) -> Any:
    return import_string(value) if isinstance(value, str) else value


def _limiter(value: Any) -> Limiter:
    found = _load(value)
    if not isinstance(found, Limiter) and callable(found):
        found = found()
    if not isinstance(found, Limiter):
        raise TypeError(
            f"SLUICE_LIMITER must give a Limiter, not {type(found).__name__}"
        )
    return found


class RateLimitMiddleware:
    """Decide every request with the configured limiter; answer 429/503 here."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.limiter = _limiter(settings.SLUICE_LIMITER)
        identify = getattr(settings, "SLUICE_IDENTIFY", None)
        self.identify: Callable[[HttpRequest], Identity] = (
            _load(identify) if identify else (lambda request: Identity())
        )
        self.trusted_proxies = TrustedProxies(
            getattr(settings, "SLUICE_TRUSTED_PROXIES", ())
        )
        self.github_headers = bool(getattr(settings, "SLUICE_GITHUB_HEADERS", False))
        self.retry_jitter = float(getattr(settings, "SLUICE_RETRY_JITTER", 0.0))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        who = self.identify(request)
        decision = self.limiter.decide(
            method=request.method or "GET",
            path=request.path_info or "/",
            tenant=who.tenant,
            user=who.user,
            api_key=who.api_key,
            ip=client_ip(
                request.META.get("REMOTE_ADDR"),
                request.META.get("HTTP_X_FORWARDED_FOR"),
                self.trusted_proxies,
            ),
        )
        request.sluice_decision = decision
        if not decision.allowed:
            answer = error_response(
                decision, github=self.github_headers, jitter=self.retry_jitter
            )
            response = HttpResponse(answer.body, status=answer.status)
            for name, value in answer.headers:
                response[name] = value
            return response
        response = self._respond(request, decision)
        for name, value in rate_limit_headers(decision, github=self.github_headers):
            response[name] = value
        return response

    def _respond(self, request: HttpRequest, decision: Decision) -> HttpResponse:
        if decision.held is None:
            return self.get_response(request)
        try:
            response = self.get_response(request)
        except BaseException:
            self.limiter.release(decision)
            raise
        if not getattr(response, "streaming", False):
            self.limiter.release(decision)
            return response
        content, release = response.streaming_content, self._releaser(decision)
        wrap = AsyncClosingIterator if response.is_async else ClosingIterator
        response.streaming_content = wrap(content, release)
        return response

    def _releaser(self, decision: Decision) -> Callable[[], None]:
        return lambda: self.limiter.release(decision)
