"""Schemathesis against a real server: every operation, every phase, every check, per role.

``make fuzz`` (or ``python -m bench.fuzz``) prepares a database of its own
(``<DATABASE_URL's name>_fuzz_bench``, dropped and re-created), a private
redis-server and gunicorn on a free loopback port with the control plane's
own settings (``DEBUG=0``); loads the demo data (published as version 1);
issues an API token for ``admin`` (superuser) and ``viewer`` and a gateway
token; then runs ``schemathesis run`` on ``/api/schema/`` once per role, with
all phases (examples, coverage, fuzzing, stateful), ``--checks all`` and
``--max-examples`` (300) per operation. It prints, per role: operations,
requests, responses 5xx, schema violations (responses whose status, content
type, headers or body the schema does not document), the other check
failures, the 401 answers and the stateful links covered, and exits 1 when
there is any 5xx or schema violation, or when the role's token no longer
works at the end of its pass.

Each role's token is issued just before its pass, so an earlier pass (the
admin may revoke gateway tokens) cannot spoil a later one. ``DELETE
/api/v1/tokens/{id}`` (your own tokens) is left out: the fuzzer finds the
token it runs with (the stateful phase lists the tokens, then deletes them)
and every request after that answers 401, which hid most of a run once. The
suite's in-process fuzz (``tests/api/test_schema_fuzz.py``) covers it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.common import (
    DEFAULT_DATABASE_URL,
    ROOT,
    bench_env,
    machine_line,
    manage,
    table,
)
from bench.servers import start_redis, stop_redis
from tests.servers import ControlPlaneServer, free_port

#: Checks whose failures are answers the schema does not document.
SCHEMA_CHECKS = {
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
}
SERVER_ERROR = "not_a_server_error"
ROLES = ("admin", "viewer", "gateway")
#: Operations left out of every pass, and why (the module docstring says more).
EXCLUDED_OPERATIONS = {
    "v1_tokens_destroy": "revokes the very token the fuzzer runs with",
}
#: A read each role may make, to check its token still works after its pass.
TOKEN_CHECK = {
    "admin": "/api/v1/tokens",
    "viewer": "/api/v1/tokens",
    "gateway": "/api/v1/snapshot",
}


def fuzz_database_url() -> str:
    parts = urlsplit(os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL))
    name = parts.path.lstrip("/") or "sluice"
    return urlunsplit(parts._replace(path=f"/{name}_fuzz_bench"))


def prepare(env: dict[str, str]) -> None:
    """A fresh database with the demo rules published."""
    manage(env, "bench_db", "--recreate")
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "seed_demo")


def role_headers(env: dict[str, str], role: str) -> list[str]:
    """The headers of ``role``, with a token issued now."""
    if role == "gateway":
        token = manage(env, "issue_token", "fuzz-gateway", "--gateway")
    else:
        token = manage(env, "issue_token", f"fuzz-{role}", "--user", role)
    return [f"Authorization: Bearer {token.strip()}"]


def token_works(url: str, role: str, headers: list[str]) -> bool:
    """Whether ``role``'s token is still accepted (its check read is not a 401)."""
    name, _, value = headers[0].partition(": ")
    request = urllib.request.Request(url + TOKEN_CHECK[role], headers={name: value})
    try:
        with urllib.request.urlopen(request, timeout=30):
            return True
    except urllib.error.HTTPError as error:
        return error.code != 401


def run_role(
    role: str, headers: list[str], url: str, options: argparse.Namespace, out: Path
) -> dict[str, object]:
    """One ``schemathesis run`` as ``role``; its figures from the NDJSON event stream."""
    events = out / f"{role}.ndjson"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{url}/api/schema/?format=json",
        "--checks",
        "all",
        "--phases",
        options.phases,
        "--max-examples",
        str(options.max_examples),
        "--seed",
        str(options.seed),
        "--workers",
        str(options.workers),
        "--request-timeout",
        "30",
        "--suppress-health-check",
        "all",
        "--continue-on-failure",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(events),
    ]
    for operation in EXCLUDED_OPERATIONS:
        command += ["--exclude-operation-id", operation]
    for header in headers:
        command += ["--header", header]
    began = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env=os.environ
    )
    console = done.stdout + done.stderr
    (out / f"{role}.log").write_text(console)
    figures = figures_of(events)
    figures["seconds"] = round(time.perf_counter() - began)
    links = re.search(r"API Links:\s+(\d+) covered / (\d+) selected", console)
    figures["links"] = f"{links[1]} / {links[2]}" if links else "?"
    figures["token works after"] = token_works(url, role, headers)
    return figures


def figures_of(events: Path) -> dict[str, object]:
    """Operations, requests, 5xx and failures by check, read from schemathesis' events;
    one line per failure (check, request, status, body) in ``<events>.failures.txt``."""
    operations: set[str] = set()
    requests = server_errors = unauthorized = 0
    failures: Counter[str] = Counter()
    lines = []
    for line in events.read_text().splitlines():
        recorder = json.loads(line).get("ScenarioFinished", {}).get("recorder") or {}
        if recorder.get("label"):
            operations.add(recorder["label"].split(" -> ")[0])
        interactions = recorder.get("interactions", {})
        for interaction in interactions.values():
            requests += 1
            status = (interaction.get("response") or {}).get("status_code", 0)
            server_errors += status >= 500
            unauthorized += status == 401
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check.get("status", "").lower() == "failure":
                    failures[check["name"]] += 1
                    lines.append(
                        _failure_line(check["name"], interactions.get(case_id))
                    )
    events.with_suffix(".failures.txt").write_text("\n".join(sorted(set(lines))))
    return {
        "operations": len(operations),
        "requests": requests,
        "5xx": server_errors,
        "401": unauthorized,
        "schema": sum(failures[name] for name in SCHEMA_CHECKS),
        "failures": dict(failures),
    }


def _failure_line(check: str, interaction: dict | None) -> str:
    if not interaction:
        return check
    request, response = interaction["request"], interaction.get("response") or {}
    body = response.get("content", {})
    text = (
        base64.b64decode(body["$base64"]).decode(errors="replace")
        if "$base64" in body
        else str(body)
    )
    return (
        f"{check}: {request['method']} {request['uri']} -> "
        f"{response.get('status_code')} {text[:300]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-examples", type=int, default=300)
    parser.add_argument("--phases", default="examples,coverage,fuzzing,stateful")
    parser.add_argument("--roles", default=",".join(ROLES))
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--server-workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "var" / "fuzz"))
    options = parser.parse_args()
    # Stopped (SIGTERM), still stop gunicorn, redis-server and schemathesis.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    redis, port, workdir = start_redis(None)
    env = bench_env(
        f"redis://127.0.0.1:{port}/0",
        DATABASE_URL=fuzz_database_url(),
        SLUICE_WEBHOOK_ALLOW_PRIVATE="0",
    )
    server = None
    try:
        prepare(env)
        server_env = {**env, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
        server = ControlPlaneServer(
            server_env, free_port(), options.server_workers
        ).start()
        print(f"# schemathesis as each role ({machine_line()})\n")
        rows = []
        for role in options.roles.split(","):
            headers = role_headers(env, role)
            figures = run_role(role, headers, server.url, options, out)
            others = {
                name: count
                for name, count in figures["failures"].items()
                if name not in SCHEMA_CHECKS and name != SERVER_ERROR
            }
            rows.append(
                (
                    role,
                    figures["operations"],
                    figures["requests"],
                    figures["5xx"],
                    figures["schema"],
                    ", ".join(f"{k} {v}" for k, v in sorted(others.items())) or "0",
                    figures["401"],
                    figures["links"],
                    "yes" if figures["token works after"] else "**no**",
                    figures["seconds"],
                )
            )
            print(f"{role}: {figures}", flush=True)
        print()
        print(
            table(
                (
                    "role",
                    "operations",
                    "requests",
                    "5xx",
                    "schema violations",
                    "other check failures",
                    "401 answers",
                    "stateful links covered",
                    "token works after",
                    "seconds",
                ),
                rows,
            )
        )
        print(f"\nLogs and events: {out}/<role>.log, <role>.ndjson")
        if any(row[3] or row[4] or row[8] != "yes" for row in rows):
            sys.exit(1)
    finally:
        if server is not None:
            server.stop()
        stop_redis(redis, workdir)


if __name__ == "__main__":
    main()
