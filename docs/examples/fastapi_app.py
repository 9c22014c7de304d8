"""A FastAPI service limited by Sluice, per route, from a rules file.

    pip install "sluice-client[yaml]" fastapi uvicorn
    uvicorn fastapi_app:app                       # memory store: one process
    SLUICE_REDIS_URL=redis://localhost:6379/0 uvicorn fastapi_app:app --workers 4

Its own tests (test_fastapi_app.py) run with the memory store and no Redis.
"""

import os
from pathlib import Path

from fastapi import Depends, FastAPI, Request

from sluice import AsyncLimiter, Identity, RulesFile
from sluice.fastapi import RateLimit, add_rate_limit_handler


def identify(request: Request) -> Identity:
    """Who is calling. A real service reads its own authentication here (a verified
    token, a session); never a header a client can set, as this example does."""
    return Identity(tenant=request.headers.get("x-tenant"))


def create_app(limiter: AsyncLimiter) -> FastAPI:
    app = FastAPI()
    add_rate_limit_handler(app)  # 429 / 503: problem+json with Retry-After
    search_limit = RateLimit(limiter, identify=identify)  # route by method and path
    report_limit = RateLimit(limiter, route="reports.run", cost=5, identify=identify)

    @app.get("/v1/search", dependencies=[Depends(search_limit)])
    async def search(q: str = "") -> dict:
        return {"q": q, "results": []}

    @app.post("/v1/reports/{report_id}/run", dependencies=[Depends(report_limit)])
    async def run_report(report_id: int) -> dict:
        return {"report": report_id, "status": "queued"}

    return app


def limiter_from_env() -> AsyncLimiter:
    """Rules from the file beside this one (re-read when it changes); Redis when
    SLUICE_REDIS_URL names one, else the memory store (one process only)."""
    rules = RulesFile(
        os.environ.get("SLUICE_RULES", Path(__file__).with_name("rules.yaml"))
    )
    return AsyncLimiter(os.environ.get("SLUICE_REDIS_URL", "memory://"), rules)


app = create_app(limiter_from_env())
