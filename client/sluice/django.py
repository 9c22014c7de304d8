"""Django middleware: the only module of ``sluice`` that imports Django.

Add ``"sluice.django.RateLimitMiddleware"`` to ``MIDDLEWARE`` and set:

- ``SLUICE_LIMITER``: a :class:`~.limiter.Limiter`, or the dotted path of one or of a
  function without arguments that returns one (called once, when Django loads
  its middleware);
- ``SLUICE_IDENTIFY`` (optional): the dotted path of ``identify(request) -> Identity``;
- ``SLUICE_TRUSTED_PROXIES`` (optional): proxy addresses or networks whose
  ``X-Forwarded-For`` is believed;
- ``SLUICE_GITHUB_HEADERS``, ``SLUICE_RETRY_JITTER`` (optional): as in :mod:`.wsgi`.

Or decorate a view with :func:`rate_limit` (a route and cost of its own, or no
middleware at all).

The middleware is synchronous; Django runs it in a thread under ASGI. The
decision is stored as ``request.sluice_decision``. Concurrency slots are
released when the view returns or raises, or, for a streaming response, when
Django closes it after the last chunk.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

# Django ships no type information (django-stubs is not a dependency of the client).
from django.conf import settings  # type: ignore[import-untyped]
from django.http import HttpRequest, HttpResponse  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

from .closing import AsyncClosingIterator, ClosingIterator
from .decision import Decision
from .headers import error_response, rate_limit_headers
from .identity import Identity, TrustedProxies, client_ip
from .limiter import Limiter

__all__ = ["RateLimitMiddleware", "rate_limit"]

_View = TypeVar("_View", bound=Callable[..., Any])


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


def _decide(
    limiter: Limiter,
    request: HttpRequest,
    identify: Callable[[HttpRequest], Identity],
    trusted: TrustedProxies,
    route: str | None = None,
    cost: int | None = None,
) -> Decision:
    """Decide ``request`` (kept as ``request.sluice_decision``)."""
    who = identify(request)
    decision = limiter.decide(
        route=route,
        method=request.method or "GET",
        path=request.path_info or "/",
        tenant=who.tenant,
        user=who.user,
        api_key=who.api_key,
        ip=client_ip(
            request.META.get("REMOTE_ADDR"),
            request.META.get("HTTP_X_FORWARDED_FOR"),
            trusted,
        ),
        cost=cost,
    )
    request.sluice_decision = decision
    return decision


def _rejection(decision: Decision, github: bool, jitter: float) -> HttpResponse:
    answer = error_response(decision, github=github, jitter=jitter)
    response = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers:
        response[name] = value
    return response


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
        decision = _decide(self.limiter, request, self.identify, self.trusted_proxies)
        if not decision.allowed:
            return _rejection(decision, self.github_headers, self.retry_jitter)
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


def rate_limit(
    route: str | None = None,
    *,
    cost: int | None = None,
    limiter: Limiter | str | None = None,
) -> Callable[[_View], _View]:
    """Decide a view's requests (without the middleware, or as another route and cost).

    ::

        @rate_limit("reports.run", cost=5)
        def run_report(request, report_id): ...

    ``route``: the Sluice route slug (None: matched by method and path); ``cost``:
    tokens per request (None: the route's); ``limiter``: a
    :class:`~.limiter.Limiter` or its dotted path (None: ``SLUICE_LIMITER``, read
    on each request, so a test may set it; a dotted path is loaded once). ``SLUICE_IDENTIFY``, ``SLUICE_TRUSTED_PROXIES``,
    ``SLUICE_GITHUB_HEADERS`` and ``SLUICE_RETRY_JITTER`` apply as for the
    middleware. Slots are released when the view returns (not streaming-aware:
    use the middleware for streaming views).
    """

    def decorate(view: _View) -> _View:
        loaded: dict[int, Limiter] = {}  #: per dotted path or factory, made once

        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            given = limiter or settings.SLUICE_LIMITER
            if isinstance(given, Limiter):
                current = given
            else:
                current = loaded.get(id(given)) or loaded.setdefault(
                    id(given), _limiter(given)
                )
            identify = getattr(settings, "SLUICE_IDENTIFY", None)
            decision = _decide(
                current,
                request,
                _load(identify) if identify else (lambda request: Identity()),
                TrustedProxies(getattr(settings, "SLUICE_TRUSTED_PROXIES", ())),
                route,
                cost,
            )
            github = bool(getattr(settings, "SLUICE_GITHUB_HEADERS", False))
            if not decision.allowed:
                jitter = float(getattr(settings, "SLUICE_RETRY_JITTER", 0.0))
                return _rejection(decision, github, jitter)
            try:
                response = view(request, *args, **kwargs)
            finally:
                current.release(decision)
            for name, value in rate_limit_headers(decision, github=github):
                response[name] = value
            return response

        return wrapped  # type: ignore[return-value]

    return decorate
