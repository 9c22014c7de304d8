"""Signed bundles on the wire: the signature header, and the published public keys."""

import gzip
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_get
from limits.gateways.tokens import token_create
from limits.models import GatewayToken
from limits.publishing.services import snapshot_publish
from sluice import KeyRing, SnapshotError, protocol
from sluice.bundle import verify_bundle_bytes
from tests.signing import TEST_KEYS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]


@pytest.fixture
def published(rules, redis_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return snapshot_publish(actor=Actor.system(), message="first")


@pytest.fixture
def gateway_secret(db):
    return token_create(token=GatewayToken(name="gw-eu-1"), actor=Actor.system())


@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_snapshot__poll__signature_of_the_served_bytes_verifies(
    client, published, gateway_secret, encoding
):
    # Given version 1 published / When a gateway polls, with or without gzip
    response = client.get(
        "/api/v1/snapshot",
        HTTP_AUTHORIZATION=f"Bearer {gateway_secret}",
        HTTP_SLUICE_GATEWAY_ID="gw-eu-1",
        HTTP_ACCEPT_ENCODING=encoding,
    )
    body = response.content
    if response.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    # Then the signature header covers the bundle's bytes, by a key gateways trust
    signed = verify_bundle_bytes(body, response[protocol.SIGNATURE], TEST_KEYS)
    assert signed.bundle.active.version == 1
    assert response[protocol.SIGNATURE].startswith(TEST_KEYS.ids[0] + ":")


@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_snapshot_document__one_version__signed_like_the_bundle(
    client, published, gateway_secret, encoding
):
    # Given version 1 published / When a tool fetches that version's document
    response = client.get(
        "/api/v1/snapshots/1",
        HTTP_AUTHORIZATION=f"Bearer {gateway_secret}",
        HTTP_ACCEPT_ENCODING=encoding,
    )
    body = response.content
    if response.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    # Then its signature covers the stored bytes, and an edited copy is refused
    assert body == bytes(published.content)
    assert TEST_KEYS.verify(body, response[protocol.SIGNATURE]) == TEST_KEYS.ids[0]
    edited = body.replace(b"1", b"2", 1)
    with pytest.raises(SnapshotError, match="does not match"):
        TEST_KEYS.verify(edited, response[protocol.SIGNATURE])


def test_well_known_keys__anonymous__the_signing_key_and_the_extra_ones(
    client, settings, tmp_path
):
    # Given a rotation's next key published beside the signing key
    upcoming = KeyRing([Ed25519PrivateKey.generate()])
    extra = tmp_path / "next.json"
    extra.write_text(json.dumps(upcoming.to_json()))
    settings.SLUICE_SIGNING_PUBLIC_KEYS_FILE = str(extra)
    # When anyone reads the well-known document
    response = client.get(protocol.SIGNING_KEYS_PATH)
    # Then it lists both, in the form gateways load
    assert response.status_code == 200
    published = KeyRing.from_json(response.json())
    assert set(published.ids) == {*TEST_KEYS.ids, *upcoming.ids}


def test_bundle__signing_key_changed__rebuilt_signed_by_the_new_key(
    published, settings
):
    # Given the bundle in Redis, signed by the tests' key
    before = snapshot_bundle_get()
    # When the control plane is restarted on a new key (step 3 of a rotation)
    new_key = Ed25519PrivateKey.generate()
    settings.SLUICE_SIGNING_KEY = new_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    after = snapshot_bundle_get()
    # Then the same bytes (same ETag) come signed by the new key, which verifies
    assert after.etag == before.etag
    assert after.signature != before.signature
    overlap = KeyRing([new_key.public_key()])
    assert (
        verify_bundle_bytes(after.body, after.signature, overlap).bundle.active.version
        == 1
    )
