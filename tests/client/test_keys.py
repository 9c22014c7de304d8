"""The key scheme: hash tags, encoded values, secrets kept out of Redis."""

from __future__ import annotations

import pytest

from sluice import Dimension
from sluice.keys import (
    MISSING,
    encode_value,
    key_template,
    owner_tag,
    subject_value,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("acme", "acme"),
        ("2001:db8::1", "2001:db8::1"),
        ("user@example.com", "user@example.com"),
        (None, MISSING),
        ("", MISSING),
    ],
)
def test_encode_value__plain_or_missing__written_as_is(value, expected):
    assert encode_value(value) == expected


@pytest.mark.parametrize("value", ["a}b{c", "x" * 65, "spaces here", "ünïcode"])
def test_encode_value__braces_long_or_unusual__hashed(value):
    encoded = encode_value(value)
    assert encoded.startswith("#")
    assert len(encoded) == 33
    assert "{" not in encoded
    assert "}" not in encoded


def test_subject_value__api_key__never_written_in_clear():
    value = subject_value(Dimension.API_KEY, None, None, "sk_live_abc", None)
    again = subject_value(Dimension.API_KEY, None, None, "sk_live_abc", None)
    assert "sk_live_abc" not in value
    assert value.startswith("#")
    assert value == again  # one bucket per key


@pytest.mark.parametrize(
    ("tenant", "ip", "counts_tenant", "expected"),
    [
        ("acme", "10.0.0.1", False, "tenant:acme"),
        ("acme", None, True, "tenant:acme"),
        (None, "10.0.0.1", True, "tenant:~"),
        (None, "10.0.0.1", False, "ip:10.0.0.1"),
        (None, None, False, "ip:~"),
    ],
)
def test_owner_tag__identity__tenant_then_shared_tenant_then_ip(
    tenant, ip, counts_tenant, expected
):
    assert owner_tag(tenant, ip, counts_tenant) == expected


def test_key_template__route_and_period__fills_owner_and_value():
    template = key_template("search", Dimension.USER, 60)
    assert (
        template % ("tenant:acme", "42") == "rl:{tenant:acme}:route:search:user:42:60s"
    )
    assert (
        key_template("*", Dimension.IP, 1) % ("ip:~", "~")
        == "rl:{ip:~}:route:*:ip:~:1s"
    )
