"""The decision service: the client's limiter behind Envoy's RLS and HTTP forward-auth.

For gateways that cannot embed Python (Envoy and what is built on it, nginx,
HAProxy, Traefik). ``sluice-decide`` (:mod:`.main`) runs it; the gRPC face
(:mod:`.rls`) needs the ``service`` extra (``pip install 'sluice-client[service]'``:
grpcio, xds-protos, uvicorn). The mapping of a gateway's request to a Sluice
request is :mod:`.request`; the decision and its answer, :mod:`.decider`; the
HTTP face, :mod:`.http`. ``docs/gateways/`` has a guide and a configuration
per gateway.
"""

from __future__ import annotations

from .decider import Decider, answer
from .http import DecisionApp
from .request import (
    DescriptorKeys,
    HeaderNames,
    Request,
    from_descriptors,
    from_headers,
)

__all__ = [
    "Decider",
    "DecisionApp",
    "DescriptorKeys",
    "HeaderNames",
    "Request",
    "answer",
    "from_descriptors",
    "from_headers",
]
