"""The forward-auth face of the decision service: an ASGI application.

nginx (``auth_request``), Traefik (``forwardAuth``) and HAProxy (a Lua action)
ask ``/v1/decide`` before they proxy a request; the request's method, path,
tenant, user and API key come from headers (:class:`~.request.HeaderNames`),
its address from the peer or, behind trusted proxies, ``X-Forwarded-For``.

==========================  ==================================================
answer                      when
==========================  ==================================================
200, RateLimit fields       admitted (the gateway copies the fields it can)
429 / 503, problem+json     rejected, or the route fails closed while Redis is down:
                            ``Retry-After``, RateLimit fields, the body the
                            Python middlewares send (Traefik passes it through)
``Sluice-Reject-Status``    a gateway that only understands some statuses
(401 or 403) in the ask     (nginx's ``auth_request``) gets that status instead,
                            with the real one in ``Sluice-Status`` and the body,
                            one line of JSON, in ``Sluice-Problem``
``Sluice-Release`` header   on an admitted answer that holds concurrency slots:
                            ``POST /v1/release`` with it frees them
==========================  ==================================================

Envoy's ``ext_authz`` filter (HTTP mode, ``path_prefix: /v1/decide``) asks
``/v1/decide`` followed by the original path, with the original method: that
path and method are decided, in place of the headers that name them; the
answers are the same (``docs/gateways/envoy-ext-authz.yaml``), and each
carries ``Sluice-Status``, the status Sluice decided (200 on an admission):
Envoy's access log sends the requests without it, those Envoy decided itself,
to the service (:mod:`.accesslog`).

A decision takes at most the service's budget (``--budget``, :data:`BUDGET`):
past it, the route's failure mode answers (:mod:`.decider`), so a gateway whose
timeout for the service is longer always gets Sluice's answer. A gateway that
closed the connection before the answer (its own timeout fired) gets none: the
call is recorded as ``gateway_timeout`` (with ``--gateway-logs``, from Envoy's
access log instead: :meth:`.Decider.gateway_left`), and the slots its decision
would have held are freed at once.

``GET /healthz`` answers 200, the snapshot version in force, the worker's
process id, the calls it is deciding and how many calls their gateway stopped
waiting for. Any other
path is a 404; a request that cannot be read is decided with what can be.

Who may ask: a peer outside the allowed networks (``--allow-from``, by default
:data:`ALLOWED_NETWORKS`: loopback and the private ranges a gateway beside the
service lives in) gets 403 on every path, whatever it sends; the peer is the TCP
peer, never ``X-Forwarded-For``. With a token (``--http-token-file``), ``/v1/decide``
and ``/v1/release`` also need ``Sluice-Token: <token>`` (401 without it):
``Authorization`` is the client's own header, which forward-auth passes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from sluice.identity import TrustedProxies

from .access import ALLOWED_NETWORKS, Access
from .decider import Decider, release_token
from .request import HeaderNames, bad_input, from_headers, headers_of

__all__ = [
    "ALLOWED_NETWORKS",
    "BUDGET",
    "DECIDE_PATH",
    "RELEASE_PATH",
    "TOKEN",
    "DecisionApp",
]

logger = logging.getLogger("sluice.service")

DECIDE_PATH = "/v1/decide"
RELEASE_PATH = "/v1/release"
REJECT_STATUS = "sluice-reject-status"
RELEASE = "Sluice-Release"
#: The status Sluice decided: on every answer to an ext_authz check (the mark of
#: Sluice's answers in Envoy's access log), and on a refusal sent as another status.
STATUS = "Sluice-Status"
#: The header a gateway sends the service's shared token in (``--http-token-file``).
TOKEN = "Sluice-Token"
#: Seconds a forward-auth decision may take by default: under the documented
#: timeouts of the gateways for the service (HAProxy 250 ms, nginx 1 s).
BUDGET = 0.1

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class DecisionApp:
    """ASGI app: ``/v1/decide``, ``/v1/release``, ``/healthz`` over a :class:`~.decider.Decider`."""

    def __init__(
        self,
        decider: Decider,
        *,
        names: HeaderNames | None = None,
        trusted_proxies: Iterable[str] = (),
        budget: float = BUDGET,
        access: Access | None = None,
    ) -> None:
        self.decider = decider
        self.names = names or HeaderNames()
        self.trusted = TrustedProxies(trusted_proxies)
        self.budget = budget
        self.access = access or Access()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope["type"] != "http":
            return None
        path = scope.get("path", "")
        if not self.peer_allowed(scope):
            return await _send(send, 403, [], b"")
        if path != "/healthz" and not self.token_given(scope):
            return await _send(send, 401, [], b"")
        try:
            if path == DECIDE_PATH:
                return await self.decide(scope, receive, send)
            if path.startswith(DECIDE_PATH + "/"):  # ext_authz: the prefix + the path
                checked = _checked(scope, self.names)
                return await self.decide(checked, receive, send, ext_authz=True)
            if path == RELEASE_PATH and scope.get("method") == "POST":
                return await self.release(scope, send)
            if path == "/healthz":
                health = {
                    "status": "ok",
                    "version": self.decider.limiter.source.current(
                        self.decider.limiter.rules_time()
                    ).version,
                    "worker": os.getpid(),
                    "in_flight": self.decider.in_flight,
                    "gateway_timeouts": self.decider.gave_up,
                }
                body = json.dumps(health).encode()
                return await _send(
                    send, 200, [("Content-Type", "application/json")], body
                )
        except Exception:  # a bug costs this answer, never the server
            logger.exception("service.http_failed: %s", path)
            return await _send(send, 500, [], b"")
        return await _send(send, 404, [], b"")

    def peer_allowed(self, scope: Scope) -> bool:
        """Whether the TCP peer is in the allowed networks."""
        peer = scope.get("client")
        return self.access.peer_allowed(peer[0] if peer else None)

    def token_given(self, scope: Scope) -> bool:
        """Whether the request carries the shared token, when the service has one."""
        if not self.access.token:
            return True
        wanted = TOKEN.lower().encode("latin-1")
        given = next((v for n, v in scope.get("headers") or () if n == wanted), b"")
        return self.access.token_matches(given)

    async def decide(
        self, scope: Scope, receive: Receive, send: Send, *, ext_authz: bool = False
    ) -> None:
        """Decide the request the headers describe within the budget, and answer
        the gateway, unless it has gone (``ext_authz``: Envoy's check, every
        answer marked with ``Sluice-Status``)."""
        deadline = asyncio.get_running_loop().time() + self.budget
        headers = headers_of(scope.get("headers") or ())
        peer = scope.get("client")
        asked = from_headers(
            lambda name: headers.get(name.lower()),
            peer=peer[0] if peer else None,
            names=self.names,
            trusted=self.trusted,
        )
        decision = await self.decider.decide(asked, deadline=deadline)
        # A request without a body has its one http.request message waiting, or
        # the server says http.disconnect at once: no wait either way. One with
        # a body is answered without asking (its body might never come).
        if not _has_body(headers) and (await receive())["type"] == "http.disconnect":
            self.decider.gateway_left(asked, decision, envoy=ext_authz)
            if decision.held is not None:  # no gateway holds its release token
                await self.decider.limiter.release_held(decision.held)
            return
        self.decider.answered(asked, decision)
        response = self.decider.answer(decision)
        status, extra = response.status, list(response.headers)
        if decision.held is not None:
            extra.append((RELEASE, release_token(decision.held)))
        substitute = _substitute(headers.get(REJECT_STATUS))
        if ext_authz or (status != 200 and substitute):
            extra.append((STATUS, str(status)))
        if status != 200 and substitute:
            extra.append(("Sluice-Problem", response.body.decode()))
            status = substitute
        await _send(send, status, extra, response.body if status != 200 else b"")

    async def release(self, scope: Scope, send: Send) -> None:
        """Free the concurrency slots of the request's ``Sluice-Release`` token."""
        headers = headers_of(scope.get("headers") or ())
        freed = await self.decider.release(headers.get(RELEASE.lower(), ""))
        await _send(send, 204 if freed else 400, [], b"")


def _has_body(headers: Mapping[str, str]) -> bool:
    return "transfer-encoding" in headers or headers.get("content-length", "0") != "0"


def _checked(scope: Scope, names: HeaderNames) -> Scope:
    """The scope of an ext_authz check (``/v1/decide`` + the original target), as a
    forward-auth ask: its method and the target after the prefix come first in the
    headers that name them (the first of repeated names wins), whatever the client sent."""
    raw = scope.get("raw_path") or scope["path"].encode()
    target = raw.split(b"?", 1)[0][len(DECIDE_PATH) :]
    if query := scope.get("query_string"):
        target += b"?" + query
    asked = [
        (names.method[0].lower().encode("latin-1"), scope["method"].encode("latin-1")),
        (names.path[0].lower().encode("latin-1"), target),
    ]
    return {**scope, "headers": [*asked, *(scope.get("headers") or ())]}


def _substitute(value: str | None) -> int | None:
    if value is None:
        return None
    if value.strip() in ("401", "403"):
        return int(value)
    bad_input("bad_reject_status", f"{value!r:.20}: only 401 or 403; ignored")
    return None


async def _send(
    send: Send, status: int, headers: list[tuple[str, str]], body: bytes
) -> None:
    raw = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers]
    raw.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
