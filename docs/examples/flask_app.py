"""A Flask service limited by Sluice, from a rules file.

    pip install "sluice-client[yaml]" flask
    flask --app flask_app run                     # memory store: one process
    SLUICE_REDIS_URL=redis://localhost:6379/0 gunicorn -w 4 flask_app:app

Its own tests (test_flask_app.py) run with the memory store and no Redis.
"""

import os
from pathlib import Path

from flask import Flask, request

from sluice import Identity, Limiter, RulesFile
from sluice.flask import Sluice


def identify() -> Identity:
    """Who is calling. A real service reads its own authentication here (a verified
    token, a session); never a header a client can set, as this example does."""
    return Identity(tenant=request.headers.get("X-Tenant"))


sluice = Sluice(identify=identify)


def create_app(limiter: Limiter) -> Flask:
    app = Flask(__name__)
    sluice.init_app(app, limiter=limiter)

    @app.get("/v1/search")  # route matched by method and path: search
    def search():
        return {"q": request.args.get("q", ""), "results": []}

    @app.post("/v1/reports/<int:report_id>/run")
    @sluice.limit(route="reports.run", cost=5)
    def run_report(report_id):
        return {"report": report_id, "status": "queued"}

    @app.get("/healthz")
    @sluice.exempt
    def health():
        return {"ok": True}

    return app


def limiter_from_env() -> Limiter:
    """Rules from the file beside this one (re-read when it changes); Redis when
    SLUICE_REDIS_URL names one, else the memory store (one process only)."""
    rules = RulesFile(
        os.environ.get("SLUICE_RULES", Path(__file__).with_name("rules.yaml"))
    )
    return Limiter(os.environ.get("SLUICE_REDIS_URL", "memory://"), rules)


app = create_app(limiter_from_env())
