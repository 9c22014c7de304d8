"""An aiohttp service limited by Sluice, from a rules file.

    pip install "sluice-client[yaml]" aiohttp
    python aiohttp_app.py                         # memory store: one process
    SLUICE_REDIS_URL=redis://localhost:6379/0 python aiohttp_app.py

Its own tests (test_aiohttp_app.py) run with the memory store and no Redis.
"""

import os
from pathlib import Path

from aiohttp import web

from sluice import AsyncLimiter, Identity, RulesFile
from sluice.aiohttp import limit, rate_limit_middleware


def identify(request: web.Request) -> Identity:
    """Who is calling. A real service reads its own authentication here (a verified
    token, a session); never a header a client can set, as this example does."""
    return Identity(tenant=request.headers.get("X-Tenant"))


async def search(request: web.Request) -> web.Response:
    return web.json_response({"q": request.query.get("q", ""), "results": []})


@limit(route="reports.run", cost=5)
async def run_report(request: web.Request) -> web.Response:
    return web.json_response({"report": request.match_info["id"], "status": "queued"})


def create_app(limiter: AsyncLimiter) -> web.Application:
    app = web.Application(
        middlewares=[rate_limit_middleware(limiter, identify=identify)]
    )
    app.router.add_get("/v1/search", search)
    app.router.add_post("/v1/reports/{id}/run", run_report)
    return app


def limiter_from_env() -> AsyncLimiter:
    rules = RulesFile(
        os.environ.get("SLUICE_RULES", Path(__file__).with_name("rules.yaml"))
    )
    return AsyncLimiter(os.environ.get("SLUICE_REDIS_URL", "memory://"), rules)


if __name__ == "__main__":
    web.run_app(create_app(limiter_from_env()), host="127.0.0.1", port=8080)
