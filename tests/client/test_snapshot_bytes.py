"""The canonical bytes of a snapshot, assembled from the rules' cached bytes, are the document's."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from sluice import Snapshot
from sluice.errors import SnapshotError
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


def test_from_bytes__canonical_stored_bytes__the_same_snapshot_as_a_full_check():
    # Given the bytes of a snapshot, as the control plane stores them
    raw = snapshot(rules(OVERRIDE, tenants={"acme": "pro"}), version=3).to_bytes()
    # When they are parsed as canonical (hash checked on the bytes, rules trusted)
    trusted = Snapshot.from_bytes(raw, canonical=True)
    # Then it is the snapshot a full check gives
    assert trusted == Snapshot.from_bytes(raw)


@pytest.mark.parametrize(
    "alter",
    [
        lambda raw: raw.replace(b'"rate":5', b'"rate":6'),
        lambda raw: raw.replace(b'"version":3', b'"version":4'),
    ],
    ids=["a limit", "the version"],
)
def test_from_bytes__canonical_but_altered__refused_by_the_hash(alter):
    # Given stored bytes changed after they were hashed
    raw = alter(snapshot(rules(OVERRIDE), version=3).to_bytes())
    # When they are parsed as canonical / Then the hash refuses them
    with pytest.raises(SnapshotError, match="does not match"):
        Snapshot.from_bytes(raw, canonical=True)


def test_from_bytes__canonical_claimed_of_other_bytes__verified_in_full():
    # Given a valid document whose bytes are not the canonical ones (spaces)
    document = snapshot(rules(OVERRIDE), version=3)
    raw = json.dumps(document.to_json(), indent=1).encode()
    # When it is parsed as canonical
    parsed = Snapshot.from_bytes(raw, canonical=True)
    # Then the full check accepted it, hash and rules
    assert parsed == document
