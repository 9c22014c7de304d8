"""The snapshot format's optional members: hot-key options and concurrency limits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sluice import (
    Snapshot,
    SnapshotError,
    describe_limit,
    parse_rules,
    validate_rules,
)
from tests.client.factories import concurrent, limit, policy, rules, snapshot

DOCS = Path(__file__).parents[2] / "docs"


def documented_example() -> bytes:
    """The example document of docs/snapshot-format.md, written before these options."""
    text = (DOCS / "snapshot-format.md").read_text()
    return re.search(r'^\{"effective_at".*\}$', text, re.MULTILINE).group(0).encode()


def test_snapshot__document_without_new_options__same_bytes_and_hash():
    # Given a document published before hot keys and concurrency limits existed
    raw = documented_example()
    # When a gateway parses it and serializes it again
    parsed = Snapshot.from_bytes(raw)
    # Then its canonical bytes, and so its hash and ETag, are unchanged
    assert parsed.to_bytes() == raw
    assert all(not lim.hot for p in parsed.rules.policies for lim in p.limits)


def test_snapshot__limits_at_defaults__no_new_members_written():
    # Given limits that use no hot-key option and a policy without concurrency limits
    document = snapshot(rules(policy("tier:pro", "search", limit("tenant", 5, 1, 10))))
    # When serialized
    data = json.loads(document.to_bytes())
    # Then the members are those of the original format only
    for item in data["rules"]["policies"]:
        assert set(item) == {"scope", "route", "expires_at", "limits"}
        for member in item["limits"]:
            assert set(member) == {
                "dimension",
                "rate",
                "period",
                "burst",
                "cost",
                "shadow",
            }


def test_snapshot__every_new_option__round_trips():
    # Given a sharded limit, a leased limit and a concurrency limit
    original = snapshot(
        rules(
            policy(
                "tier:pro",
                "search",
                limit("tenant", 50_000, 1, 50_000, shards=8),
                limit("user", 600, 60, 600, lease=20, lease_ms=250),
                concurrency=(concurrent("tenant", 5, timeout=120),),
            )
        )
    )
    # When its bytes are parsed back
    parsed = Snapshot.from_bytes(original.to_bytes())
    # Then nothing is lost, and the hash verifies
    assert parsed == original
    pro = next(p for p in parsed.rules.policies if p.scope == "tier:pro")
    assert pro.concurrency == (concurrent("tenant", 5, timeout=120),)
    assert {
        lim.dimension.value: (lim.shards, lim.lease, lim.lease_ms) for lim in pro.limits
    } == {
        "tenant": (8, 0, 1000),
        "user": (1, 20, 250),
    }


@pytest.mark.parametrize(
    ("member", "value", "message"),
    [
        ("shards", 0, "at least 1"),
        ("lease", -1, "at least 0"),
        ("lease_ms", "soon", "must be an integer"),
        ("colour", "red", "unknown member"),
    ],
)
def test_snapshot__bad_optional_member__refused_with_its_path(member, value, message):
    data = json.loads(
        snapshot(
            rules(policy("tier:pro", "search", limit("tenant", 5, 1, 10)))
        ).to_bytes()
    )
    pro = next(p for p in data["rules"]["policies"] if p["scope"] == "tier:pro")
    pro["limits"][0][member] = value
    with pytest.raises(SnapshotError, match=message) as caught:
        parse_rules(data["rules"])
    assert "limits[0]" in caught.value.path


@pytest.mark.parametrize(
    ("given", "field", "message"),
    [
        (limit("tenant", 10, 1, 10, shards=4, lease=2), "limits[0].lease", "not both"),
        (
            limit("tenant", 10, 1, 3, shards=4),
            "limits[0].shards",
            "below the request cost",
        ),
        (limit("tenant", 10, 1, 10, shards=65), "limits[0].shards", "at most 64"),
        (limit("tenant", 10, 1, 10, lease=11), "limits[0].lease", "exceed the burst"),
        (
            limit("tenant", 10, 1, 10, lease=2, lease_ms=60_001),
            "limits[0].lease_ms",
            "at most",
        ),
    ],
)
def test_validate_rules__bad_hot_key_option__problem_named(given, field, message):
    # Given a policy with a hot-key option that cannot work (and an enforcing limit)
    problems = validate_rules(rules(policy("tier:pro", "search", given)))
    # Then validation names the member and why
    assert [(p.field, message in p.message) for p in problems] == [(field, True)]


def test_validate_rules__shadow_lease_and_duplicate_concurrency__refused():
    given = policy(
        "tier:pro",
        "search",
        limit("tenant", 10, 1, 10),
        limit("user", 10, 60, 10, shadow=True, lease=2),
        concurrency=(concurrent("tenant", 2), concurrent("tenant", 3, timeout=86_401)),
    )
    fields = sorted(p.field for p in validate_rules(rules(given)))
    assert fields == ["concurrency[1]", "concurrency[1].timeout", "limits[1].lease"]


def test_describe_limit__hot_key_and_concurrency__in_words():
    assert describe_limit(limit("tenant", 50_000, 1, 50_000, shards=8)) == (
        "per tenant: 50,000 / s, burst 50,000, 8 shards"
    )
    assert describe_limit(limit("user", 600, 60, 600, lease=20, lease_ms=250)) == (
        "per user: 600 / min, burst 600, leases of 20 for 250 ms"
    )
    assert describe_limit(concurrent("api_key", 5, timeout=60)) == (
        "per api key: at most 5 in flight (released after 60 s at most)"
    )
