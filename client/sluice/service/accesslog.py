"""What Envoy decided on its own, from its access log: no unseen admission.

Envoy's rate-limit filter answers a request by its own ``failure_mode_deny``
when the service's answer has not come within the filter's ``timeout``. The
service answers well before that (:mod:`.decider`), but a service behind on
its work may never see such a call: grpc drops a call its caller cancelled
before the service read it. Those requests would be admitted (or refused) with
no trace in Sluice, and no bound Sluice could keep.

So every answer of the service carries a marker in the filter's dynamic
metadata (:data:`MARKER`), and ``docs/gateways/envoy.yaml`` sends Envoy's access
log of the requests *without* it, the ones Envoy decided itself, to the
service over Envoy's access log service (ALS, gRPC, batched by Envoy off the
request path). Each is recorded in the decision events as
``gateway_timeout`` with its tenant and route, as a call the service saw
cancelled is. With ``--gateway-logs`` the service leaves calls Envoy stopped
waiting for to this log (it records each one anyway), so none is counted twice
(:meth:`.Decider.gateway_left`). Envoy's ext_authz filter
(``envoy-ext-authz.yaml``) does the same: there every answer of the HTTP face
carries ``Sluice-Status``, which the filter turns into its dynamic metadata.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from sluice.identity import TrustedProxies

from .decider import Decider
from .request import HeaderNames, from_headers

__all__ = ["MARKER", "GatewayDecisions", "add_to_server"]

logger = logging.getLogger("sluice.service")

#: The dynamic metadata key every answer of the service carries (value ``true``),
#: under the ``envoy.filters.http.ratelimit`` namespace.
MARKER = "sluice"

_METHODS = {
    value.number: value.name
    for value in base_pb2.RequestMethod.DESCRIPTOR.values
    if value.number != base_pb2.METHOD_UNSPECIFIED
}
_NO_PROXIES = TrustedProxies(())


class GatewayDecisions(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    """``StreamAccessLogs``: records each logged request as the gateway's decision."""

    def __init__(self, decider: Decider, *, names: HeaderNames | None = None) -> None:
        self.decider = decider
        self.names = names or HeaderNames()

    async def StreamAccessLogs(  # the gRPC method's name
        self,
        messages: AsyncIterator[Any],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> Any:
        async for message in messages:
            for entry in message.http_logs.log_entry:
                try:
                    self.record(entry)
                except Exception:  # one odd entry must not end the stream
                    logger.exception("service.access_log_failed")
        return als_pb2.StreamAccessLogsResponse()

    def record(self, entry: Any) -> None:
        """Record one request Envoy decided without the service."""
        request = entry.request
        names = self.names
        headers = {
            name.lower(): value for name, value in request.request_headers.items()
        }
        headers[names.method[0].lower()] = _METHODS.get(request.request_method, "GET")
        headers[names.path[0].lower()] = request.path
        address = entry.common_properties.downstream_remote_address.socket_address
        asked = from_headers(
            lambda name: headers.get(name.lower()),
            peer=address.address or None,
            names=names,
            trusted=_NO_PROXIES,
        )
        self.decider.stopped_waiting(asked)


def add_to_server(server: grpc.aio.Server, service: GatewayDecisions) -> None:
    """Register ``service`` on a ``grpc.aio`` server."""
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(service, server)
