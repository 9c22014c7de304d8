"""The audit log and the gateways agree on who the client is: one client_ip for both."""

from __future__ import annotations

import pytest

from limits.core.audit import request_ip
from limits.models import AuditEntry
from sluice.identity import TrustedProxies, client_ip
from tests.api.conftest import ApiClient

PROXIES = ["127.0.0.0/8", "::1"]

CASES = [
    # peer, X-Forwarded-For, the client
    (
        "127.0.0.5",
        "198.51.100.7",
        "198.51.100.7",
    ),  # a network, not only its first address
    ("::1", "2001:db8::5, 127.0.0.9", "2001:db8::5"),  # IPv6 peer, trusted hops skipped
    ("::ffff:127.0.0.1", "203.0.113.4", "203.0.113.4"),  # IPv4-mapped peer
    ("127.0.0.1", "::ffff:198.51.100.3", "198.51.100.3"),  # IPv4-mapped hop, normalized
    (
        "198.51.100.9",
        "10.0.0.1",
        "198.51.100.9",
    ),  # an untrusted peer's header is ignored
    ("127.0.0.1", "203.0.113.9, 127.0.0.2", "203.0.113.9"),
    ("127.0.0.1", "not-an-address", None),
]


@pytest.mark.parametrize(("peer", "forwarded", "expected"), CASES)
def test_request_ip__same_trusted_proxies__agrees_with_the_client(
    settings, peer, forwarded, expected
):
    # Given the control plane and a gateway configured with the same proxies
    settings.SLUICE_TRUSTED_PROXIES = PROXIES
    meta = {"REMOTE_ADDR": peer, "HTTP_X_FORWARDED_FOR": forwarded}
    # When each of them tells the client's address
    server = request_ip(meta)
    gateway = client_ip(peer, forwarded, TrustedProxies(PROXIES))
    # Then both give the same address
    assert server == gateway == expected


def test_audit__change_through_a_trusted_proxy_network__records_the_client(
    settings, product_user
):
    # Given a proxy network the control plane trusts
    settings.SLUICE_TRUSTED_PROXIES = ["127.0.0.0/8"]
    api = ApiClient().as_user(product_user)
    # When a tier is created through it
    response = api.post(
        "/api/v1/tiers",
        {"slug": "gold", "name": "Gold"},
        format="json",
        REMOTE_ADDR="127.0.0.8",
        HTTP_X_FORWARDED_FOR="198.51.100.20",
    )
    # Then the audit entry holds the client's address, not the proxy's
    assert response.status_code == 201, response.content
    entry = AuditEntry.objects.get(
        object_type="tier", object_id=str(response.data["id"])
    )
    assert entry.source_ip == "198.51.100.20"
