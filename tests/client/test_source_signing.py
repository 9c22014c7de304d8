"""Signed bundles in SnapshotSource: what a gateway refuses, fetched or read from disk.

The attack of issue 25: a last-known-good file whose rules were edited and whose
hashes were recomputed gave a tenant 40 of 40 requests where its tier allows 5.
"""

from __future__ import annotations

import json
import logging

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sluice import Bundle, KeyRing, Limiter, connect
from sluice.signing import sign
from sluice.source import PollResult, SnapshotSource
from tests.client.factories import REDIS_TIMEOUT, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer
from tests.signing import TEST_KEYS, TEST_SIGNING_KEY

#: The free tier allows 5 searches a minute (burst 5).
FREE_TIER = rules(policy("tier:free", "search", limit("tenant", 5, 60, 5)))
V1 = snapshot(FREE_TIER, version=1)
UNREACHABLE = "http://127.0.0.1:9/api/v1/snapshot"


@pytest.fixture
def control_plane():
    server = ProtocolServer().start()
    server.serve(Bundle(V1))
    yield server
    server.stop()


@pytest.fixture
def make_source(control_plane, tmp_path):
    def make(url=None, keys=TEST_KEYS):
        return SnapshotSource(
            url or control_plane.url,
            control_plane.token,
            gateway_id="gw-1",
            public_keys=keys,
            cache_path=tmp_path / "bundle.json",
            timeout=30.0,
            rng=lambda: 0.5,
        )

    return make


def _forge(path):
    """Edit the cached free tier to 1000 a minute and recompute every hash, as an
    attacker with write access to the gateway's disk would (the signature stays)."""
    head, _, _body = path.read_bytes().partition(b"\n")
    forged = rules(policy("tier:free", "search", limit("tenant", 1000, 60, 1000)))
    snapshot_ = snapshot(forged, version=1)
    assert snapshot_.hash != V1.hash
    forged_body = json.dumps(Bundle(snapshot_).to_json(), sort_keys=True).encode()
    path.write_bytes(head + b"\n" + forged_body)


def _admitted(source, redis_server, tenant="globex", requests=40):
    limiter = Limiter(connect(redis_server.url, timeout=REDIS_TIMEOUT), source)
    decisions = [
        limiter.decide(route="search", tenant=tenant, ip="203.0.113.7")
        for _ in range(requests)
    ]
    return sum(d.allowed for d in decisions), {d.snapshot_version for d in decisions}


def test_start__cache_edited_and_rehashed__refused_with_one_line_and_never_applied(
    make_source, tmp_path, redis_server, redis_client, caplog
):
    # Given a gateway that applied version 1 and wrote it to disk
    make_source().poll_once()
    # When the file's rules are edited (hashes recomputed) and the gateway restarts
    # while the control plane is unreachable
    _forge(tmp_path / "bundle.json")
    with caplog.at_level(logging.WARNING, logger="sluice.source"):
        restarted = make_source(url=UNREACHABLE)
    admitted, versions = _admitted(restarted, redis_server)
    # Then the file is refused with one line naming the signature, the strict
    # built-in rules apply, and the tenant does not get its 40 requests
    refusals = [r.getMessage() for r in caplog.records if "cache_ignored" in r.msg]
    assert len(refusals) == 1
    assert "signature" in refusals[0]
    assert "does not match" in refusals[0]
    assert versions == {0}
    assert admitted < 40


def test_start__cache_intact__its_rules_apply_five_of_forty(
    make_source, redis_server, redis_client
):
    # Given a gateway that applied version 1 and wrote it to disk (the control
    # experiment of the test above: the same restart, the file untouched)
    make_source().poll_once()
    # When it restarts while the control plane is unreachable
    restarted = make_source(url=UNREACHABLE)
    admitted, versions = _admitted(restarted, redis_server)
    # Then version 1 is in force from the file: 5 of 40
    assert versions == {1}
    assert admitted == 5


def _other_key(body: bytes) -> str:
    return sign(Ed25519PrivateKey.generate(), body)


@pytest.mark.parametrize(
    ("signer", "says"),
    [
        (lambda body: None, "not signed"),
        (_other_key, "unknown key"),
        (lambda body: "k-0000000000000000:AAAA", "unknown key"),
    ],
    ids=["unsigned", "unknown-key", "made-up-key-id"],
)
def test_poll__unsigned_or_unknown_key__refused_and_old_rules_kept(
    control_plane, make_source, caplog, signer, says
):
    # Given a gateway on version 1
    source = make_source()
    source.poll_once()
    # When the control plane (or someone in its place) serves a version 2 that is
    # unsigned, or signed by a key the gateway does not trust
    lax = rules(policy("tier:free", "search", limit("tenant", 999, 1, 999)))
    body = json.dumps(Bundle(snapshot(lax, version=2)).to_json(), sort_keys=True)
    body = body.encode()
    signature = signer(body)
    control_plane.serve_bytes(body, signature=signature)
    with caplog.at_level(logging.WARNING, logger="sluice.source"):
        result = source.poll_once()
    source.poll_once()
    # Then it is refused with one line, version 1 stays, and the next poll says why
    lines = [r.getMessage() for r in caplog.records if "snapshot.rejected" in r.msg]
    assert result is PollResult.REJECTED
    assert source.current().version == 1
    assert len(lines) == 1
    assert says in lines[0]
    assert control_plane.requests[-1]["Sluice-Rejected-Version"] == "2"
    assert says in control_plane.requests[-1]["Sluice-Rejected-Reason"]


def test_poll__signed_by_the_right_key_over_other_bytes__refused(
    control_plane, make_source
):
    # Given a gateway on version 1
    source = make_source()
    source.poll_once()
    # When version 2 comes with the trusted key's signature of other bytes (version 1's)
    v2 = snapshot(FREE_TIER, version=2)
    body = json.dumps(Bundle(v2).to_json(), sort_keys=True).encode()
    control_plane.serve_bytes(body, signature=sign(TEST_SIGNING_KEY, b"other bytes"))
    # Then it is refused
    assert source.poll_once() is PollResult.REJECTED
    assert source.current().version == 1


def test_rotation__overlap__bundles_by_old_and_new_key_both_accepted(
    control_plane, make_source, tmp_path
):
    # Given gateways configured, for a rotation's overlap, with the old and new keys
    new_key = Ed25519PrivateKey.generate()
    overlap = KeyRing([TEST_SIGNING_KEY.public_key(), new_key.public_key()])
    source = make_source(keys=overlap)
    # When the control plane signs with the old key, then with the new one
    old_result = source.poll_once()
    v2 = snapshot(FREE_TIER, version=2)
    body = json.dumps(Bundle(v2).to_json(), sort_keys=True).encode()
    control_plane.serve_bytes(body, signature=sign(new_key, body))
    new_result = source.poll_once()
    # Then both are applied, and the file signed by the new key is read back at start
    assert (old_result, new_result) == (PollResult.APPLIED, PollResult.APPLIED)
    assert make_source(url=UNREACHABLE, keys=overlap).current().version == 2
    # And once the old key is dropped, a gateway that trusts the new key only
    # still reads it; one that trusts the old key only refuses it
    only_new = KeyRing([new_key.public_key()])
    assert make_source(url=UNREACHABLE, keys=only_new).current().version == 2
    assert make_source(url=UNREACHABLE, keys=TEST_KEYS).current().version == 0


def test_start__cache_from_before_signing__refused(make_source, tmp_path, caplog):
    # Given a cache file in the format written before bundles were signed
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps({"etag": '"x"', "bundle": Bundle(V1).to_json()}))
    # When the gateway starts
    with caplog.at_level(logging.WARNING, logger="sluice.source"):
        source = make_source(url=UNREACHABLE)
    # Then it is refused (the strict built-in rules apply until the first poll)
    assert source.current().version == 0
    assert "not a signed Sluice bundle file" in caplog.text


def test_keyring__from_json__kid_must_be_the_keys_own():
    # Given the published document of the tests' key, with its kid mistyped
    document = TEST_KEYS.to_json()
    document["keys"][0]["kid"] = "k-typo"
    # When a gateway loads it / Then it is refused, naming the field
    with pytest.raises(ValueError, match=r"keys\[0\]\.kid"):
        KeyRing.from_json(document)
    assert KeyRing.from_json(TEST_KEYS.to_json()).ids == TEST_KEYS.ids
