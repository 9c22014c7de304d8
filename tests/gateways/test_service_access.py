"""Who may ask the decision service, on both faces: allowed networks, a shared token, TLS.

``sluice-decide`` runs as a subprocess on a real Redis, polling a protocol
server; every request is a real HTTP(S) request from loopback, so "outside the
allowed networks" is a service told to allow only a network loopback is not in.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import urllib.error
import urllib.request

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from sluice import Bundle
from sluice.identity import TrustedProxies
from sluice.service.access import ALLOWED_NETWORKS, grpc_peer_address
from tests.celery_fixtures import wait_until
from tests.client.factories import ROUTES, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers

RULES = snapshot(
    rules(policy("default", "search", limit("tenant", 6, 60, 3)), routes=ROUTES)
)
SEARCH = {
    "X-Forwarded-Method": "GET",
    "X-Forwarded-Uri": "/v1/search",
    "X-Tenant": "acme",
}


@pytest.fixture
def serve(redis_server, tmp_path):
    """Start ``sluice-decide`` with extra options; stopped after the test."""
    started = []

    def start(*extra: str) -> servers.DecisionService:
        rules_server = ProtocolServer().start()
        rules_server.serve(Bundle(RULES))
        service = servers.DecisionService(
            rules_server.url.removesuffix("/api/v1/snapshot"),
            rules_server.token,
            redis_server.url,
            tmp_path,
            extra=extra,
        )
        started.append((service, rules_server))
        return service.start()

    yield start
    for service, rules_server in started:
        service.stop()
        rules_server.stop()


def call(url: str, headers=(), *, context: ssl.SSLContext | None = None):
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_default_networks__loopback_and_private_only():
    allowed = TrustedProxies(ALLOWED_NETWORKS)
    for inside in (
        "127.0.0.1",
        "::1",
        "10.2.3.4",
        "172.20.0.5",
        "192.168.1.9",
        "fd00::5",
    ):
        assert inside in allowed
    for outside in ("203.0.113.9", "8.8.8.8", "2606:4700::1111", "100.64.0.1"):
        assert outside not in allowed


def test_http__peer_outside_allowed_networks__403_on_every_path(serve):
    # Given a service that answers only 192.0.2.0/24, and a peer on loopback
    service = serve("--allow-from", "192.0.2.0/24")
    base = f"http://127.0.0.1:{service.http_port}"
    # When that peer asks for a decision, a release or the health
    # Then every answer is a 403, and the refusal is logged once
    assert call(f"{base}/v1/decide", SEARCH)[0] == 403
    assert call(f"{base}/healthz")[0] == 403
    assert (
        call(f"{base}/v1/decide", {**SEARCH, "X-Forwarded-For": "192.0.2.7"})[0] == 403
    )
    wait_until(
        lambda: "service.peer_refused: 127.0.0.1" in service.output(),
        timeout=60,
        every=0.05,
        why="the refusal in the log of sluice-decide",
    )
    assert service.output().count("service.peer_refused") == 1


def test_http__token_required__401_without_it_200_with_it(serve, tmp_path):
    # Given a service with a shared token, reachable from loopback (the default networks)
    token_file = tmp_path / "http-token"
    token_file.write_text("gw-secret\n")
    service = serve("--http-token-file", str(token_file)).wait_version(1)
    base = f"http://127.0.0.1:{service.http_port}"
    # When gateways ask without the token, with a wrong one, in Authorization, and with it
    # Then only the one with the right Sluice-Token is decided; /healthz needs none
    assert call(f"{base}/v1/decide", SEARCH)[0] == 401
    assert call(f"{base}/v1/decide", {**SEARCH, "Sluice-Token": "nope"})[0] == 401
    bearer = {**SEARCH, "Authorization": "Bearer gw-secret"}
    assert call(f"{base}/v1/decide", bearer)[0] == 401
    assert call(f"{base}/v1/decide", {**SEARCH, "Sluice-Token": "gw-secret"})[0] == 200
    assert call(f"{base}/healthz")[0] == 200


def test_http__tls__https_answers_plain_http_refused(serve, tmp_path):
    # Given a service speaking HTTPS with a certificate from a private CA
    ca, server = _pki(tmp_path)
    service = serve("--tls-cert", str(server[0]), "--tls-key", str(server[1]))
    context = ssl.create_default_context(cafile=str(ca))
    base = f"https://127.0.0.1:{service.http_port}"
    # When a gateway trusting that CA asks over TLS
    wait_until(
        lambda: _version(f"{base}/healthz", context) == 1,
        timeout=60,
        every=0.05,
        why="the service enforcing version 1, over HTTPS",
    )
    # Then it is decided; a plain-HTTP ask gets no answer
    assert call(f"{base}/v1/decide", SEARCH, context=context)[0] == 200
    with pytest.raises(ConnectionError):  # the server closes on a non-TLS hello
        urllib.request.urlopen(
            f"http://127.0.0.1:{service.http_port}/healthz", timeout=30
        )


def test_http__tls_client_ca__a_gateway_without_certificate_refused(serve, tmp_path):
    # Given a service that requires client certificates from its CA
    ca, server, gateway = _pki(tmp_path, client=True)
    service = serve(
        "--tls-cert",
        str(server[0]),
        "--tls-key",
        str(server[1]),
        "--tls-client-ca",
        str(ca),
    )
    base = f"https://127.0.0.1:{service.http_port}"
    with_cert = ssl.create_default_context(cafile=str(ca))
    with_cert.load_cert_chain(str(gateway[0]), str(gateway[1]))
    # When a gateway with a certificate asks, and one without
    wait_until(
        lambda: _version(f"{base}/healthz", with_cert) == 1,
        timeout=60,
        every=0.05,
        why="the service enforcing version 1, over mutual TLS",
    )
    assert call(f"{base}/v1/decide", SEARCH, context=with_cert)[0] == 200
    # Then the one without is refused in the handshake
    # (an alert in the handshake, or the connection closed before any answer)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        call(
            f"{base}/v1/decide",
            SEARCH,
            context=ssl.create_default_context(cafile=str(ca)),
        )


def ask_rls(channel: grpc.Channel, metadata=(), tenant="initech"):
    """One RLS call for ``tenant``'s search, as Envoy makes it (a tenant no HTTP test
    spends: the tests share a Redis); the reply or the gRPC error."""
    entries = {"method": "GET", "path": "/v1/search", "tenant": tenant}
    request = rls_pb2.RateLimitRequest(
        domain="sluice",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[
                    ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
                    for k, v in entries.items()
                ]
            )
        ],
    )
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    try:  # a deadline for hangs only
        return stub.ShouldRateLimit(request, timeout=30, metadata=metadata)
    except grpc.RpcError as error:
        return error


def test_grpc_peer_address__the_forms_grpc_gives():
    assert grpc_peer_address("ipv4:10.0.0.7:40112") == "10.0.0.7"
    assert grpc_peer_address("ipv6:%5B::1%5D:40112") == "::1"
    assert grpc_peer_address("ipv6:[2001:db8::5]:80") == "2001:db8::5"
    assert grpc_peer_address("unix:/run/sluice.sock") is None


def test_grpc__peer_outside_allowed_networks__permission_denied(serve):
    # Given a service that answers only 192.0.2.0/24, and a peer on loopback
    service = serve("--allow-from", "192.0.2.0/24")  # its /healthz refuses us too
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        # When that peer asks over RLS, twice
        first, second = ask_rls(channel), ask_rls(channel)
    # Then both calls are refused, not decided, and the refusal is logged once
    for refused in (first, second):
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "--allow-from" in refused.details()
    wait_until(
        lambda: "service.peer_refused: 127.0.0.1" in service.output(),
        timeout=60,
        every=0.05,
        why="the refusal in the log of sluice-decide",
    )
    assert service.output().count("service.peer_refused") == 1


def test_grpc__token_required__unauthenticated_without_it(serve, tmp_path):
    # Given a service whose gRPC face has a shared token (its HTTP face has none)
    token_file = tmp_path / "grpc-token"
    token_file.write_text("rls-secret\n")
    service = serve("--grpc-token-file", str(token_file)).wait_version(1)
    with grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        # When Envoy asks without the token, with a wrong one, and with it
        missing = ask_rls(channel)
        wrong = ask_rls(channel, [("sluice-token", "nope")])
        right = ask_rls(channel, [("sluice-token", "rls-secret")])
    # Then only the call with the token is decided
    assert missing.code() == grpc.StatusCode.UNAUTHENTICATED
    assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED
    assert right.overall_code == rls_pb2.RateLimitResponse.OK
    fresh = {**SEARCH, "X-Tenant": "umbrella"}  # its HTTP face wants no token
    assert call(f"http://127.0.0.1:{service.http_port}/v1/decide", fresh)[0] == 200


def test_grpc__tls_client_ca__decided_over_mutual_tls_only(serve, tmp_path):
    # Given a service with a certificate, requiring the gateway's (both faces)
    ca, server, gateway = _pki(tmp_path, client=True)
    service = serve(
        "--tls-cert",
        str(server[0]),
        "--tls-key",
        str(server[1]),
        "--tls-client-ca",
        str(ca),
    )
    trusted = ca.read_bytes()
    with_cert = grpc.ssl_channel_credentials(
        root_certificates=trusted,
        private_key=gateway[1].read_bytes(),
        certificate_chain=gateway[0].read_bytes(),
    )
    address = f"127.0.0.1:{service.grpc_port}"
    # When Envoy asks over mutual TLS (once the service enforces version 1)
    with grpc.secure_channel(address, with_cert) as channel:
        wait_until(
            lambda: (
                getattr(ask_rls(channel), "overall_code", None)
                == rls_pb2.RateLimitResponse.OK
            ),
            timeout=60,
            every=0.05,
            why="an RLS decision over mutual TLS",
        )
    # Then a gateway without a certificate, or in plaintext, gets no decision
    without_cert = grpc.ssl_channel_credentials(root_certificates=trusted)
    with grpc.secure_channel(address, without_cert) as channel:
        assert ask_rls(channel).code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(address) as channel:
        assert ask_rls(channel).code() == grpc.StatusCode.UNAVAILABLE


def _version(url: str, context: ssl.SSLContext) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return json.loads(response.read())["version"]
    except OSError:
        return None


def _pki(tmp_path, *, client: bool = False):
    """A CA, a server certificate for 127.0.0.1 and, with ``client``, a gateway's
    certificate, as PEM files: (ca, (cert, key)[, (cert, key)])."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca_cert = _certificate(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    issued = [ca_path]
    for name in ("server", "gateway")[: 2 if client else 1]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = _certificate(subject, key.public_key(), ca_name, ca_key, ca=False)
        cert_path, key_path = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        issued.append((cert_path, key_path))
    return tuple(issued)


def _certificate(subject, public_key, issuer, issuer_key, *, ca: bool):
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        san = x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        )
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())
