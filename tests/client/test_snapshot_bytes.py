"""The canonical bytes of a snapshot, assembled from the rules' cached bytes, are the document's."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from sluice import Snapshot
from sluice.snapshot import canonical_json
from tests.client.factories import limit, policy, rules, snapshot

OVERRIDE = policy(
    "tenant:acme",
    "search",
    limit("user", 5, 60, 10, cost=2),
    expires_at=datetime(2027, 1, 1, tzinfo=UTC),
)


@pytest.mark.parametrize(
    "rules_",
    [rules(), rules(OVERRIDE, tenants={"acme": "pro", "émile": "free"})],
    ids=["default only", "override and non-ASCII tenant"],
)
def test_to_bytes__any_snapshot__canonical_json_of_its_document(rules_):
    # Given a snapshot
    document = snapshot(rules_, version=3)
    # When its bytes are taken
    raw = document.to_bytes()
    # Then they are the canonical JSON of its document, hashed without "hash"
    assert raw == canonical_json(document.to_json())
    unhashed = document.to_json()
    del unhashed["hash"]
    assert hashlib.sha256(canonical_json(unhashed)).hexdigest() == document.hash
    assert Snapshot.from_bytes(raw).hash == document.hash


@pytest.mark.parametrize("value", [1.5, -0.25, 1e20], ids=["float", "negative", "exp"])
def test_canonical_json__a_float_anywhere__refused(value):
    with pytest.raises(TypeError, match="integers only"):
        canonical_json({"a": [1, {"b": value}]})


def test_canonical_json__digits_and_dots_inside_strings__accepted():
    assert (
        canonical_json({"a": "x:1.5", "b": ["[2e3"]}) == b'{"a":"x:1.5","b":["[2e3"]}'
    )
