"""The nginx module's calendar (client/sluice/nginx/calendar.lua) is sluice/calendar.py:
the same period bounds for every zone's POSIX rule, over DST changes, short months
and leap years, run in nginx's own Lua (Debian's nginx with libnginx-mod-http-lua)."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime

import pytest

from sluice.calendar import period_bounds
from tests.client.test_calendar import ZONES, tz_rule
from tests.gateways.servers import Process, binary
from tests.servers import ROOT, free_port

CONFIG = """
daemon off;
worker_processes 1;
pid nginx.pid;
error_log stderr warn;
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path tmp/body;
    client_body_buffer_size 4m;
    client_max_body_size 4m;
    lua_package_path "%(client)s/?.lua;;";
    server {
        listen 127.0.0.1:%(port)d;
        location = /bounds {
            content_by_lua_block {
                local cjson = require "cjson.safe"
                local calendar = require "sluice.nginx.calendar"
                ngx.req.read_body()
                local out = {}
                for i, case in ipairs(cjson.decode(ngx.req.get_body_data())) do
                    local ok, a, b, c = pcall(calendar.period_bounds, case[1], case[2], case[3], case[4], case[5])
                    out[i] = ok and { a, b, c } or "error"
                end
                ngx.say(cjson.encode(out))
            }
        }
    }
}
"""


@pytest.fixture(scope="module")
def lua(tmp_path_factory):
    """nginx answering POST /bounds: a list of period_bounds arguments -> their bounds."""
    prefix = tmp_path_factory.mktemp("nginx-calendar")
    (prefix / "tmp").mkdir()
    port = free_port()
    (prefix / "nginx.conf").write_text(
        CONFIG % {"client": ROOT / "client", "port": port}
    )
    command = [binary("nginx"), "-p", str(prefix), "-e", "stderr", "-c", "nginx.conf"]
    process = Process(command, port).start()
    yield f"http://127.0.0.1:{port}/bounds"
    process.stop()


def in_lua(url: str, cases: list[list]) -> list:
    body = json.dumps(cases).encode()
    with urllib.request.urlopen(urllib.request.Request(url, body), timeout=60) as reply:
        return json.loads(reply.read())


def test_period_bounds__lua__as_python_for_every_zone_period_and_billing_day(lua):
    # Given moments of a leap year and the next (DST changes, Feb 29, short months)
    first = int(datetime(2028, 1, 1, tzinfo=UTC).timestamp())
    moments = [
        first + day * 86_400 + 3_600 * (day % 24) + 17 for day in range(0, 731, 3)
    ]
    cases = [
        [t, per, cycle, tz_rule(zone), day]
        for zone in ZONES
        for per, cycle, day in (
            ("day", "calendar", 1),
            ("month", "calendar", 1),
            ("month", "billing", 17),
            ("month", "billing", 29),
            ("month", "billing", 31),
        )
        for t in moments
    ]
    # When nginx's Lua computes their bounds
    answers = in_lua(lua, cases)
    # Then every answer is Python's
    expected = [list(period_bounds(*case)) for case in cases]
    wrong = [
        (c, a, e) for c, a, e in zip(cases, answers, expected, strict=True) if a != e
    ]
    assert wrong == []


def test_period_bounds__lua__bad_rule_refused(lua):
    assert in_lua(lua, [[0, "day", "calendar", "CET-1CEST", 1]]) == ["error"]
