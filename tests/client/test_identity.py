"""Client IP through trusted proxies only."""

from __future__ import annotations

import pytest

from sluice.identity import TrustedProxies, client_ip

PROXIES = TrustedProxies(["10.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # no proxy configured for this peer: its own address, whatever the header says
        ("203.0.113.9", "198.51.100.1", "203.0.113.9"),
        # a trusted proxy: the rightmost address that is not a trusted proxy
        ("10.0.0.2", "198.51.100.1", "198.51.100.1"),
        ("10.0.0.2", "1.1.1.1, 198.51.100.1, 10.0.0.7", "198.51.100.1"),
        ("::1", "2001:db8::5", "2001:db8::5"),
        # every hop a trusted proxy: the leftmost
        ("10.0.0.2", "10.0.0.3, 10.0.0.4", "10.0.0.3"),
        # a trusted proxy that sent no header: the proxy itself
        ("10.0.0.2", None, "10.0.0.2"),
        # garbage where the client should be: unknown (shared bucket)
        ("10.0.0.2", "not-an-ip", None),
        # IPv4 written as IPv6 is the IPv4 address
        ("::ffff:203.0.113.9", None, "203.0.113.9"),
    ],
)
def test_client_ip__peer_and_forwarded_for__only_trusted_proxies_are_believed(
    peer, forwarded, expected
):
    assert client_ip(peer, forwarded, PROXIES) == expected


def test_client_ip__no_trusted_proxies__header_ignored():
    assert client_ip("127.0.0.1", "198.51.100.1", TrustedProxies()) == "127.0.0.1"
