"""The aiohttp example's own tests: the memory store (sluice.testing), no Redis."""

import asyncio

from aiohttp.test_utils import TestClient, TestServer
from aiohttp_app import create_app


def requests(limiter, method, path, tenant, times):
    """``times`` requests through a test server; their statuses and last headers."""

    async def run():
        async with TestClient(TestServer(create_app(limiter))) as client:
            statuses, headers = [], {}
            for _ in range(times):
                async with client.request(
                    method, path, headers={"X-Tenant": tenant}
                ) as answer:
                    statuses.append(answer.status)
                    headers = dict(answer.headers)
            return statuses, headers

    return asyncio.run(run())


def test_search__free_tenant_over_its_burst__429_until_a_token_refills(
    sluice_async_limiter, sluice_clock
):
    statuses, headers = requests(
        sluice_async_limiter, "GET", "/v1/search", "initech", 6
    )
    assert statuses == [200] * 5 + [429]
    assert headers["Retry-After"] == "12"
    sluice_clock.advance(12)
    assert requests(sluice_async_limiter, "GET", "/v1/search", "initech", 1)[0] == [200]


def test_report__costs_five__two_of_ten_then_429(sluice_async_limiter):
    statuses, _ = requests(sluice_async_limiter, "POST", "/v1/reports/7/run", "acme", 3)
    assert statuses == [200, 200, 429]
