"""The FastAPI example's own tests: the memory store (sluice.testing), no Redis."""

from fastapi.testclient import TestClient
from fastapi_app import create_app


def test_search__free_tenant_over_its_burst__429_until_a_token_refills(
    sluice_async_limiter, sluice_clock
):
    client = TestClient(create_app(sluice_async_limiter))
    # a free tenant has 5 searches of burst, one more per 12 s
    answers = [
        client.get("/v1/search", headers={"X-Tenant": "initech"}) for _ in range(6)
    ]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    assert answers[0].headers["RateLimit-Policy"] == '"tenant-min";q=5;w=60'
    assert answers[-1].headers["Retry-After"] == "12"
    assert answers[-1].json()["error"] == "rate_limited"
    sluice_clock.advance(12)
    assert client.get("/v1/search", headers={"X-Tenant": "initech"}).status_code == 200


def test_report__costs_five__two_of_ten_then_429(sluice_async_limiter):
    client = TestClient(create_app(sluice_async_limiter))
    answers = [
        client.post("/v1/reports/7/run", headers={"X-Tenant": "acme"}) for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[1].headers["RateLimit"].startswith('"tenant-h";r=0;')
