"""The Flask example's own tests: the memory store (sluice.testing), no Redis."""

from flask_app import create_app


def test_search__free_tenant_over_its_burst__429_until_a_token_refills(
    sluice_limiter, sluice_clock
):
    client = create_app(sluice_limiter).test_client()
    answers = [
        client.get("/v1/search", headers={"X-Tenant": "initech"}) for _ in range(6)
    ]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    assert answers[0].headers["RateLimit-Policy"] == '"tenant-min";q=5;w=60'
    assert answers[-1].headers["Content-Type"] == "application/problem+json"
    assert answers[-1].headers["Retry-After"] == "12"
    sluice_clock.advance(12)
    assert client.get("/v1/search", headers={"X-Tenant": "initech"}).status_code == 200


def test_report__costs_five__two_of_ten_then_429(sluice_limiter):
    client = create_app(sluice_limiter).test_client()
    answers = [
        client.post("/v1/reports/7/run", headers={"X-Tenant": "acme"}) for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 429]


def test_health__exempt__never_limited(sluice_limiter):
    client = create_app(sluice_limiter).test_client()
    assert {client.get("/healthz").status_code for _ in range(50)} == {200}
    assert "RateLimit" not in client.get("/healthz").headers
