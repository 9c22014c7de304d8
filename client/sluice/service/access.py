"""Who may ask the decision service, on either face: the peer's network and a token.

A decision costs a Redis round trip and spends a tenant's budget, so both faces
answer only the peers they are told to (``--allow-from``, by default
:data:`ALLOWED_NETWORKS`). The peer is the TCP peer, never a header. Each face
may also require a shared token: HTTP in the ``Sluice-Token`` header
(``--http-token-file``), gRPC in the ``sluice-token`` metadata
(``--grpc-token-file``; Envoy's ``grpc_service.initial_metadata``).

The HTTP face answers a refused peer 403 and a missing token 401
(:mod:`.http`); the gRPC face answers ``PERMISSION_DENIED`` and
``UNAUTHENTICATED`` (:class:`GrpcGate`), which Envoy treats as the service
failing: its ``failure_mode_deny`` decides, as when the service is down. So
each refused peer is logged once (``service.peer_refused``): a gateway on the
wrong network must be visible, not quietly failing open.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import unquote

import grpc

from sluice.identity import TrustedProxies

__all__ = ["ALLOWED_NETWORKS", "GRPC_TOKEN", "Access", "GrpcGate", "grpc_peer_address"]

logger = logging.getLogger("sluice.service")

#: The peers served by default: loopback, RFC 1918 and unique-local IPv6, where a
#: gateway asking the service lives; a public address needs ``--allow-from``.
ALLOWED_NETWORKS = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
)
#: The gRPC metadata key of the shared token (``--grpc-token-file``).
GRPC_TOKEN = "sluice-token"
_WARNED_PEERS = 64  #: refused peers logged once each, up to this many
_JUDGED_PEERS = 4096  #: peer addresses whose verdict is remembered


class Access:
    """The allowed networks and a face's token; judges peers, remembering each verdict."""

    def __init__(
        self, allowed: Iterable[str] = ALLOWED_NETWORKS, token: str = ""
    ) -> None:
        self.allowed = TrustedProxies(allowed)  # a set of networks, as proxies are
        self.token = token.encode()
        self._judged: dict[str | None, bool] = {}
        self._refused: set[str] = set()

    def peer_allowed(self, address: str | None) -> bool:
        """Whether the TCP peer is in the allowed networks (refusals logged once per peer)."""
        verdict = self._judged.get(address)
        if verdict is None:
            verdict = address in self.allowed
            if len(self._judged) < _JUDGED_PEERS:
                self._judged[address] = verdict
        if verdict:
            return True
        if str(address) not in self._refused and len(self._refused) < _WARNED_PEERS:
            self._refused.add(str(address))
            logger.warning("service.peer_refused: %s is outside --allow-from", address)
        return False

    def token_matches(self, given: bytes | str | None) -> bool:
        """Whether ``given`` is the shared token, or no token is required."""
        if not self.token:
            return True
        if isinstance(given, str):
            given = given.encode()
        return hmac.compare_digest(given or b"", self.token)


def grpc_peer_address(peer: str) -> str | None:
    """The address of a gRPC peer string (``ipv4:10.0.0.7:40112``,
    ``ipv6:%5B::1%5D:40112``); None for a Unix socket or anything else."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    return unquote(rest.rpartition(":")[0]).strip("[]")


Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


class GrpcGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Every call of the gRPC face (RLS, and the access log) passes :class:`Access`
    first: a call with no valid token is refused before it is read, a peer outside
    the networks before it is decided. A Unix-socket peer is local: allowed."""

    def __init__(self, access: Access) -> None:
        self.access = access
        #: per method: (the handler behind the peer check, the token's refusal)
        self._gated: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        gated = self._gated.get(details.method)
        if gated is None:
            handler = await continuation(details)
            if handler is None:  # no such method: grpc answers UNIMPLEMENTED
                return None
            gated = self._gated[details.method] = (
                _shaped(handler, self._checked(handler)),
                _shaped(handler, _unauthenticated),
            )
        if self.access.token:
            given = next(
                (v for k, v in details.invocation_metadata or () if k == GRPC_TOKEN),
                None,
            )
            if not self.access.token_matches(given):
                return gated[1]
        return gated[0]

    def _checked(self, handler: grpc.RpcMethodHandler) -> Behavior:
        behavior = handler.unary_unary or handler.stream_unary
        access = self.access

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            address = grpc_peer_address(context.peer())
            if address is not None and not access.peer_allowed(address):
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    "sluice: this peer is outside the service's --allow-from",
                )
            return await behavior(request, context)

        return checked


def _shaped(
    handler: grpc.RpcMethodHandler, behavior: Behavior
) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape (unary or client-streaming, the two the
    service registers) and codecs, running ``behavior``."""
    make = (
        grpc.unary_unary_rpc_method_handler
        if handler.unary_unary is not None
        else grpc.stream_unary_rpc_method_handler
    )
    return make(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


async def _unauthenticated(request: Any, context: grpc.aio.ServicerContext) -> None:
    await context.abort(
        grpc.StatusCode.UNAUTHENTICATED,
        f"sluice: the {GRPC_TOKEN} metadata is missing or wrong",
    )
