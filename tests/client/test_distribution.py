"""The client is its own distribution: it installs alone, and beside the other rate limiters.

Each test builds ``client/`` into a wheel and installs it into a new virtualenv
with nothing but what its metadata asks for (and, for the second test, the
libraries it must live beside), then decides a request against a real Redis.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The libraries that own the import name ``limits`` (alisaifee/limits) and build on it.
PEERS = ("limits==5.8.0", "slowapi==0.1.10", "starlette==1.10.0")
#: Distributions of the control plane that a gateway must never receive.
SERVER_ONLY = ("django", "celery", "psycopg", "djangorestframework", "gunicorn")

DECIDE = """
import sys
from importlib import metadata

from sluice import ALL_ROUTES, DEFAULT_SCOPE, Dimension, Limit, Limiter, Policy, Rules
from sluice import Snapshot, StaticSource, connect
from datetime import datetime, timezone

rules = Rules(
    tiers={}, tenants={}, routes={},
    policies=(Policy(DEFAULT_SCOPE, ALL_ROUTES, (Limit(Dimension.IP, 1, 60, 2),)),),
)
now = datetime.now(timezone.utc)
snapshot = Snapshot.build(version=1, parent=None, published_at=now, effective_at=now, rules=rules)
# a timeout no healthy call reaches on a loaded machine: the answers are Redis's
limiter = Limiter(connect(sys.argv[1], timeout=5.0), StaticSource(snapshot))
answers = [limiter.decide(ip="192.0.2.7").allowed for _ in range(3)]
installed = sorted(d.metadata["Name"].lower() for d in metadata.distributions())
print(answers)
print(installed)
# the nginx module ships with the scripts it runs (docs/gateways/nginx.md)
from importlib import resources
package = resources.files("sluice")
shipped = ["nginx/gateway.lua", "nginx/rules.lua", "lua/token_bucket.lua", "lua/hot.lua"]
print(all(package.joinpath(name).is_file() for name in shipped))
"""

BESIDE = """
import asyncio
import sys
from datetime import datetime, timezone

from limits import RateLimitItemPerMinute, storage, strategies
from slowapi import Limiter as SlowapiLimiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from sluice import ALL_ROUTES, DEFAULT_SCOPE, AsyncLimiter, Dimension, Limit, Policy
from sluice import Rules, Snapshot, StaticSource, connect_async
from sluice.asgi import RateLimitMiddleware

url = sys.argv[1]
# alisaifee/limits on its own: a moving window of 2 a minute
moving = strategies.MovingWindowRateLimiter(storage.RedisStorage(url))
print([moving.hit(RateLimitItemPerMinute(2), "beside-test") for _ in range(3)])

# slowapi limits one endpoint to 1 a minute; Sluice's ASGI middleware (burst 2) wraps the app
slow = SlowapiLimiter(key_func=get_remote_address, storage_uri=url)


@slow.limit("1/minute")
async def home(request: Request):
    return PlainTextResponse("ok")


app = Starlette(routes=[Route("/", home)])
app.state.limiter = slow
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
rules = Rules(
    tiers={}, tenants={}, routes={},
    policies=(Policy(DEFAULT_SCOPE, ALL_ROUTES, (Limit(Dimension.IP, 1, 60, 2),)),),
)
now = datetime.now(timezone.utc)
snapshot = Snapshot.build(version=1, parent=None, published_at=now, effective_at=now, rules=rules)


async def main():
    # a timeout no healthy call reaches on a loaded machine: the answers are Redis's
    limiter = AsyncLimiter(connect_async(url, timeout=5.0), StaticSource(snapshot))
    wrapped = RateLimitMiddleware(app, limiter)
    answers = []
    for _ in range(3):
        sent = []
        scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "client": ("192.0.2.9", 5000),
                 "server": ("127.0.0.1", 80), "scheme": "http", "query_string": b"", "root_path": "",
                 "http_version": "1.1", "raw_path": b"/"}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await wrapped(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        kind = dict(start["headers"]).get(b"content-type", b"").decode()
        answers.append((start["status"], kind.split(";")[0]))
    print(answers)


asyncio.run(main())
"""


def _wheel(tmp_path: Path) -> Path:
    """The client's wheel, built from a copy of ``client/`` (a build writes beside its
    sources, and tests run in parallel)."""
    source = tmp_path / "client"
    shutil.copytree(
        ROOT / "client",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            tmp_path,
            source,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sluice_client-*.whl")
    return wheel


def _venv(tmp_path: Path, *requirements: str | Path) -> Path:
    """A new virtualenv (no system packages) with ``requirements`` installed; its python."""
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    python = target / "bin" / "python"
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *map(str, requirements),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    return python


def _run(python: Path, script: str, *args: str) -> list[str]:
    """Run ``script`` away from the repository (its ``limits/`` must not shadow the
    library), PYTHONPATH included (a worktree's run of the suite sets it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [python, "-c", script, *args],
        cwd=python.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


@pytest.mark.timeout(400)
def test_client__installed_alone_in_a_fresh_venv__decides_without_the_server(
    tmp_path, redis_server, redis_client
):
    # Given the client's wheel installed with its own dependencies only
    python = _venv(tmp_path, _wheel(tmp_path))
    # When it decides three requests of one address against a real Redis (burst 2)
    answers, installed, nginx_module = _run(python, DECIDE, redis_server.url)
    # Then it admits two, rejects the third, and nothing of the control plane came with it
    assert answers == "[True, True, False]"
    assert nginx_module == "True"  # and the nginx module came with its scripts
    assert "sluice-client" in installed
    assert "redis" in installed
    assert not [name for name in SERVER_ONLY if f"'{name}'" in installed]


@pytest.mark.timeout(400)
def test_client__beside_alisaifee_limits_and_slowapi__all_three_work(
    tmp_path, redis_server, redis_client
):
    # Given one environment with the client, limits and slowapi
    python = _venv(tmp_path, _wheel(tmp_path), *PEERS)
    # When limits hits a moving window, and one Starlette app is limited by slowapi
    # (1 a minute) inside Sluice's ASGI middleware (burst 2), on the same real Redis
    moving, answers = _run(python, BESIDE, redis_server.url)
    # Then limits' own import name is intact, slowapi answers the second request and
    # Sluice the third (its problem+json 429)
    assert moving == "[True, True, False]"
    assert answers == (
        "[(200, 'text/plain'), (429, 'application/json'), (429, 'application/problem+json')]"
    )
