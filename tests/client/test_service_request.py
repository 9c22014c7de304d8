"""The decision service's mapping of a gateway's request to the limiter's arguments (pure)."""

from __future__ import annotations

import pytest

from sluice import TrustedProxies
from sluice.service.request import (
    MAX_VALUE,
    DescriptorKeys,
    HeaderNames,
    Request,
    from_descriptors,
    from_headers,
    parse_mapping,
)


def test_descriptors__entries_of_all_descriptors__merged_first_value_wins():
    # Given Envoy's descriptors: route by :method and :path, then identity entries
    descriptors = [
        [
            ("method", "GET"),
            ("path", "/v1/orders/7%2A?x=1"),
            ("remote_address", "::ffff:203.0.113.9"),
        ],
        [("tenant", "acme")],
        [("tenant", "globex"), ("user", "42")],
    ]
    # When they are mapped with the default keys
    request = from_descriptors(descriptors, keys=DescriptorKeys())
    # Then one request: the path without its query, decoded; the address normalized
    assert request == Request(
        method="GET", path="/v1/orders/7*", tenant="acme", user="42", ip="203.0.113.9"
    )


def test_descriptors__hits_addend__request_then_descriptor_then_route_cost():
    keys = DescriptorKeys()
    assert from_descriptors([], keys=keys, hits_addend=3).cost == 3
    assert from_descriptors([], keys=keys, descriptor_hits=[2, 5]).cost == 5
    assert from_descriptors([], keys=keys).cost is None  # the route's
    assert from_descriptors([], keys=keys, hits_addend=10**9).cost is None  # too big


def test_descriptors__configured_keys__read_instead_of_the_defaults():
    keys = parse_mapping(["tenant=org", "route=generic_key"], DescriptorKeys())
    request = from_descriptors(
        [[("generic_key", "search"), ("org", "acme")]], keys=keys
    )
    assert (request.route, request.tenant) == ("search", "acme")
    with pytest.raises(ValueError, match="FIELD=KEY"):
        parse_mapping(["colour=blue"], DescriptorKeys())


def test_descriptors__oversized_value__dropped():
    request = from_descriptors(
        [[("tenant", "a" * (MAX_VALUE + 1))]], keys=DescriptorKeys()
    )
    assert request.tenant is None


@pytest.mark.parametrize(
    ("peer", "forwarded", "ip"),
    [
        ("127.0.0.1", "198.51.100.7", "198.51.100.7"),  # the gateway is trusted
        ("192.0.2.50", "198.51.100.7", "192.0.2.50"),  # anyone else: its own address
    ],
)
def test_headers__client_address__only_from_trusted_proxies(peer, forwarded, ip):
    sent = {
        "X-Forwarded-Method": "post",
        "X-Forwarded-Uri": "/v1/orders?draft=1",
        "X-Tenant": "acme",
        "X-Forwarded-For": forwarded,
        "Sluice-Cost": "4",
    }
    request = from_headers(
        sent.get, peer=peer, names=HeaderNames(), trusted=TrustedProxies(["127.0.0.1"])
    )
    assert request == Request(
        method="POST", path="/v1/orders", tenant="acme", ip=ip, cost=4
    )


def test_headers__nginx_names__second_choice_read():
    sent = {"X-Original-Method": "GET", "X-Original-URI": "/v1/search?q=1"}
    request = from_headers(
        sent.get, peer="127.0.0.1", names=HeaderNames(), trusted=TrustedProxies()
    )
    assert (request.method, request.path, request.tenant) == ("GET", "/v1/search", None)
