"""Flask extension: every request decided before its view, per-view routes and costs.

::

    from flask import Flask
    from sluice.flask import Sluice

    sluice = Sluice(limiter=Limiter("redis://redis:6379/0", rules))
    app = Flask(__name__)
    sluice.init_app(app)                   # or Sluice(app, limiter=...)

    @app.get("/v1/reports/<id>/run")
    @sluice.limit(route="reports.run", cost=5)
    def run_report(id): ...

    @app.get("/healthz")
    @sluice.exempt
    def health(): ...

A view without :meth:`Sluice.limit` is matched to its Sluice route by method and
path. A rejected request is answered before the view runs (429, or 503 when its
route fails closed, problem+json with ``Retry-After``); an admitted one gets the
RateLimit fields. The decision is ``flask.g.sluice_decision``; concurrency slots
are released when the request is torn down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flask import Flask, Response, current_app, g, request

from .headers import error_response, rate_limit_headers
from .identity import Identity, TrustedProxies, client_ip
from .limiter import Limiter

__all__ = ["Sluice"]

_View = TypeVar("_View", bound=Callable[..., Any])
_ROUTE, _COST, _EXEMPT = "_sluice_route", "_sluice_cost", "_sluice_exempt"


class Sluice:
    """The extension: ``limiter`` decides (a sync :class:`~.limiter.Limiter`);
    ``identify()`` tells who calls (read ``flask.request``); other options as in
    :class:`sluice.wsgi.RateLimitMiddleware`."""

    def __init__(
        self,
        app: Flask | None = None,
        *,
        limiter: Limiter | None = None,
        identify: Callable[[], Identity] | None = None,
        trusted_proxies: Iterable[str] = (),
        github_headers: bool = False,
        retry_jitter: float = 0.0,
    ) -> None:
        self.limiter = limiter
        self.identify = identify or Identity
        self.trusted_proxies = TrustedProxies(trusted_proxies)
        self.github_headers = github_headers
        self.retry_jitter = retry_jitter
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask, *, limiter: Limiter | None = None) -> None:
        """Decide ``app``'s requests (with ``limiter`` when given: one per app)."""
        app.extensions["sluice"] = limiter or self.limiter
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._teardown)

    @staticmethod
    def limit(
        route: str | None = None, *, cost: int | None = None
    ) -> Callable[[_View], _View]:
        """Decide a view's requests as Sluice route ``route``, at ``cost`` tokens."""

        def mark(view: _View) -> _View:
            setattr(view, _ROUTE, route)
            setattr(view, _COST, cost)
            return view

        return mark

    @staticmethod
    def exempt(view: _View) -> _View:
        """Never decide this view's requests (health checks, say)."""
        setattr(view, _EXEMPT, True)
        return view

    def _before(self) -> Response | None:
        view = current_app.view_functions.get(request.endpoint or "")
        limiter: Limiter | None = current_app.extensions.get("sluice")
        if limiter is None or getattr(view, _EXEMPT, False):
            return None
        who = self.identify()
        decision = limiter.decide(
            route=getattr(view, _ROUTE, None),
            method=request.method,
            path=request.path,
            tenant=who.tenant,
            user=who.user,
            api_key=who.api_key,
            ip=client_ip(
                request.remote_addr,
                request.headers.get("X-Forwarded-For"),
                self.trusted_proxies,
            ),
            cost=getattr(view, _COST, None),
        )
        g.sluice_decision = decision
        if decision.allowed:
            return None
        answer = error_response(
            decision, github=self.github_headers, jitter=self.retry_jitter
        )
        return Response(answer.body, status=answer.status, headers=answer.headers)

    def _after(self, response: Response) -> Response:
        decision = g.get("sluice_decision")
        if decision is not None and decision.allowed:
            for name, value in rate_limit_headers(decision, github=self.github_headers):
                response.headers[name] = value
        return response

    def _teardown(self, exc: BaseException | None) -> None:
        decision = g.get("sluice_decision")
        if decision is not None and decision.held is not None:
            current_app.extensions["sluice"].release(decision)
