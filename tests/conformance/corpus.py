"""The conformance corpus: its inputs, how a step is observed, and how answers compare.

Every implementation of Sluice's enforcement (the Python client, sync and
asyncio; the decision service over gRPC and HTTP; the nginx module) is run
through the same scenarios (``scenarios.json``) on the same rules
(``rules.json``), and what it does is observed from outside, the same way for
all of them:

- the answer the client gets: status, ``RateLimit-Policy``, ``RateLimit``,
  ``Sluice-Degraded``,
  ``Retry-After``, ``Content-Type`` and the problem+json body;
- the scripts it ran on Redis, seen through ``MONITOR``: which script, its keys
  and its arguments (``token_bucket.lua`` and ``hot.lua``, the decisions;
  ``release.lua`` and ``charge.lua`` run in the background and are not compared);
- the keys Redis holds after the step (an in-flight set with its size);
- the decision events, per (tenant, route, policy, version, outcome, limit).

``corpus.json`` holds what the Python client did (``generate.py``). Time
passes while a scenario runs, so the values that count down (``Retry-After``,
``t=`` of ``RateLimit``, the seconds in the body) may be lower than the
corpus' by up to :data:`TOLERANCE` seconds, never higher (the corpus is
generated on a calm machine, where a scenario takes well under a second and
every such value is whole: ``ceil(600 - a few ms)`` is 600). With hourly and
daily limits nothing else can change between two calls of a scenario: no token
refills in less than ten seconds.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from sluice import Bundle, Snapshot
from sluice.identity import TrustedProxies
from sluice.quota import Dimension, Limit
from sluice.rules import Rules
from sluice.service.request import HeaderNames, from_headers
from sluice.snapshot import parse_rules

HERE = Path(__file__).parent
RULES_FILE = HERE / "rules.json"
SCENARIOS_FILE = HERE / "scenarios.json"
CORPUS_FILE = HERE / "corpus.json"

VERSION = 7  #: the snapshot version of the corpus' rules
PUBLISHED = datetime(2026, 1, 1, tzinfo=UTC)
TOLERANCE = 5  #: seconds a count-down value may differ by (see the module docstring)
PEER = "127.0.0.1"  #: every request comes from loopback, a trusted proxy

COMPARED_HEADERS = (
    "content-type",
    "ratelimit-policy",
    "ratelimit",
    "retry-after",
    "sluice-degraded",
)


def rules() -> Rules:
    return parse_rules(json.loads(RULES_FILE.read_text()))


def snapshot() -> Snapshot:
    """The corpus' snapshot, as gateways get it (canonical bytes: limits in their order)."""
    built = Snapshot.build(
        version=VERSION,
        parent=None,
        published_at=PUBLISHED,
        effective_at=PUBLISHED,
        rules=rules(),
    )
    return Snapshot.from_bytes(built.to_bytes())


#: the scheduled version every implementation rehearses beside the active one
SCHEDULED_VERSION = VERSION + 1
SCHEDULED_AT = datetime(2099, 1, 1, tzinfo=UTC)


def scheduled() -> Snapshot:
    """The version scheduled after the corpus' (never in force: 2099), which
    every gateway rehearses (``docs/rehearsal.md``): tier free's search burst
    down to 1 (its own buckets, flag "2"); an IP limit added to tier pro's
    search (the tenant bucket shared, flag "3"); reports.run's burst down to 40
    (rehearsed in hot.lua's call)."""
    active = snapshot()
    policies = []
    for policy in active.rules.policies:
        key = (policy.scope, policy.route, policy.is_override)
        if key == ("tier:free", "search", False):
            policy = replace(policy, limits=(replace(policy.limits[0], burst=1),))
        elif key == ("tier:pro", "search", False):
            added = Limit(Dimension.IP, 100, 3600, 2)
            policy = replace(policy, limits=(*policy.limits, added))
        elif key == ("default", "reports.run", False):
            policy = replace(policy, limits=(replace(policy.limits[0], burst=40),))
        policies.append(policy)
    built = Snapshot.build(
        version=SCHEDULED_VERSION,
        parent=VERSION,
        published_at=PUBLISHED,
        effective_at=SCHEDULED_AT,
        rules=replace(active.rules, policies=tuple(policies)),
    )
    return Snapshot.from_bytes(built.to_bytes())


def bundle() -> Bundle:
    """What the control plane serves: the active version and the scheduled one."""
    return Bundle(snapshot(), (scheduled(),))


def scenarios() -> list[dict[str, Any]]:
    return json.loads(SCENARIOS_FILE.read_text())["scenarios"]


def corpus() -> list[dict[str, Any]]:
    return json.loads(CORPUS_FILE.read_text())["scenarios"]


def expand(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario's requests, one per step (``times`` repeated); a corpus
    scenario's, from its steps."""
    if "steps" in scenario:
        return [step["request"] for step in scenario["steps"]]
    return [
        {key: value for key, value in request.items() if key != "times"}
        for request in scenario["requests"]
        for _ in range(request.get("times", 1))
    ]


def forward_auth_headers(request: dict[str, Any]) -> dict[str, str]:
    """The headers of a forward-auth ask for ``request`` (nginx's names)."""
    return {
        "X-Original-Method": request["method"],
        "X-Original-URI": request["target"],
        **request.get("headers", {}),
    }


def limiter_arguments(request: dict[str, Any]) -> dict[str, Any]:
    """What the decision service makes of ``request``: the limiter's arguments.

    The model of reading a request (method, path, identity, cost, address)
    is the service's :func:`~sluice.service.request.from_headers`.
    """
    headers = {k.lower(): v for k, v in forward_auth_headers(request).items()}
    asked = from_headers(
        lambda name: headers.get(name.lower()),
        peer=PEER,
        names=HeaderNames(),
        trusted=TrustedProxies([PEER]),
    )
    return asked.arguments()


# -- answers ----------------------------------------------------------------


@dataclass
class Answer:
    """What a client got: status, headers (lower-case names), body."""

    status: int
    headers: dict[str, str]
    body: bytes


def rendered(answer: Answer) -> dict[str, Any]:
    """The compared part of an answer, as the corpus stores it (:func:`timeless`)."""
    headers = {
        name: answer.headers[name]
        for name in COMPARED_HEADERS
        if name in answer.headers
    }
    if answer.status == 200:  # an upstream's own Content-Type is not Sluice's
        headers.pop("content-type", None)
    body = json.loads(answer.body) if answer.status != 200 and answer.body else None
    return timeless({"status": answer.status, "headers": headers, "body": body})


_QUOTA_T = re.compile(r'("[^"]+-quota";r=-?\d+;t=)\d+')
_MONTH_W = re.compile(r'("[^"]+-month-quota";q=\d+;w=)\d+')


def timeless(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` without what depends on the calendar day the scenario runs on: a
    calendar quota's ``t`` (its period's end), a month's ``w`` (its length), and the
    wait of a 429 a quota took part in (``*``). The rest of it stays golden."""
    headers = answer["headers"]
    if "ratelimit" in headers:
        headers["ratelimit"] = _QUOTA_T.sub(r"\1*", headers["ratelimit"])
    if "ratelimit-policy" in headers:
        headers["ratelimit-policy"] = _MONTH_W.sub(r"\1*", headers["ratelimit-policy"])
    body = answer["body"]
    violated = body.get("violated-policies", []) if isinstance(body, dict) else []
    if any(name.endswith("-quota") for name in violated):
        if "retry-after" in headers:
            headers["retry-after"] = "*"
        body["retry_after_seconds"] = "*"
        for key in ("detail", "message"):
            if isinstance(body.get(key), str):
                body[key] = _RETRY_IN.sub("retry in * s", body[key])
    return answer


_ITEM = re.compile(r'^"([^"]+)";r=(-?\d+);t=(\d+)$')
_RETRY_IN = re.compile(r"retry in (\d+) s")


def _close(expected: int, actual: int) -> bool:
    """Whether a count-down value is the corpus' or up to TOLERANCE s further down."""
    return expected - TOLERANCE <= actual <= expected


def _ratelimit_differs(expected: str, actual: str) -> bool:
    pairs = list(zip(expected.split(", "), actual.split(", "), strict=False))
    if len(expected.split(", ")) != len(actual.split(", ")):
        return True
    for want, got in pairs:
        w, g = _ITEM.match(want), _ITEM.match(got)
        if w is None or g is None:
            return want != got
        if w[1] != g[1] or w[2] != g[2] or not _close(int(w[3]), int(g[3])):
            return True
    return False


def _body_differs(expected: Any, actual: Any) -> bool:
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return expected != actual
    if set(expected) != set(actual):
        return True
    for key, want in expected.items():
        got = actual[key]
        if key == "retry_after_seconds":
            if want == got:  # "*" when the calendar decides it (timeless)
                continue
            if (
                not isinstance(got, int)
                or not isinstance(want, int)
                or not _close(want, got)
            ):
                return True
        elif key in ("detail", "message") and isinstance(got, str):
            found = _RETRY_IN.search(got)
            wanted = _RETRY_IN.search(want)
            if (found is None) != (wanted is None):
                return True
            if found and wanted:
                if not _close(int(wanted[1]), int(found[1])):
                    return True
                got = got.replace(found[0], wanted[0])
            if got != want:
                return True
        elif got != want:
            return True
    return False


def answer_problems(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """How ``actual`` (:func:`rendered`) differs from ``expected``, beyond the tolerance."""
    problems = []
    if expected["status"] != actual["status"]:
        problems.append(f"status {actual['status']}, expected {expected['status']}")
    want, got = expected["headers"], actual["headers"]
    if set(want) != set(got):
        problems.append(f"headers {sorted(got)}, expected {sorted(want)}")
    for name in set(want) & set(got):
        if name == "ratelimit":
            differs = _ratelimit_differs(want[name], got[name])
        elif name == "retry-after":
            differs = want[name] != got[name] and not (
                want[name].isdigit()
                and got[name].isdigit()
                and _close(int(want[name]), int(got[name]))
            )
        else:
            differs = want[name] != got[name]
        if differs:
            problems.append(f"{name}: {got[name]!r}, expected {want[name]!r}")
    if _body_differs(expected["body"], actual["body"]):
        problems.append(f"body {actual['body']!r}, expected {expected['body']!r}")
    return problems


# -- decision events -----------------------------------------------------------


def event_key(event: dict[str, Any]) -> tuple[Any, ...]:
    return (
        event["tenant"],
        event["route"],
        event["policy"],
        event["version"],
        event["outcome"],
        event["limit"],
        tuple(event["rehearsed"]) if event["rehearsed"] else None,
    )


def expected_events(scenarios: Iterable[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Decision events the corpus' steps make, counted by what they say, and their
    rehearsals: ``("rehearsal", tenant, route, version, rejected)``."""
    counts: Counter[tuple[Any, ...]] = Counter()
    for scenario in scenarios:
        for step in scenario["steps"]:
            event = step["expect"]["event"]
            counts[event_key(event)[:6]] += 1
            if event["rehearsed"]:
                version, rejected = event["rehearsed"]
                key = ("rehearsal", event["tenant"], event["route"], version, rejected)
                counts[key] += 1
    return counts


def stream_events(
    client: redis.Redis, stream: str = "sluice:decisions"
) -> Counter[tuple[Any, ...]]:
    """Decision events written to ``stream`` (``sluice.metrics`` format), counted
    as :func:`expected_events` counts them."""
    counts: Counter[tuple[Any, ...]] = Counter()
    for _, fields in client.xrange(stream):
        for record in json.loads(fields[b"events"]):
            _, tenant, route, policy, version, outcome, limit, n = record
            counts[(tenant, route, policy, version, outcome, limit)] += n
        for record in json.loads(fields.get(b"rehearsals", b"[]")):
            _, tenant, route, version, requests, rejected = record
            counts[("rehearsal", tenant, route, version, True)] += rejected
            counts[("rehearsal", tenant, route, version, False)] += requests - rejected
    return +counts


def wait_events(
    client: redis.Redis, expected: Counter[tuple[Any, ...]], timeout: float = 30.0
) -> Counter[tuple[Any, ...]]:
    """The stream's events once they number at least ``expected``'s (flushes are periodic)."""
    deadline = time.monotonic() + timeout
    total = sum(expected.values())
    while True:
        found = stream_events(client)
        if sum(found.values()) >= total or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


# -- running a scenario -----------------------------------------------------------

Decide = Callable[[dict[str, Any], dict[str, Any]], Answer]


def step_problems(
    expected: dict[str, Any], observed: dict[str, Any], *, head: bool = False
) -> list[str]:
    """How an observed step differs from the corpus' (answer, script calls, store).

    ``head``: the request was a HEAD, whose answer has no body over HTTP.
    """
    response = expected["response"]
    if head and observed["response"]["body"] is None:
        response = {**response, "body": None}
    problems = answer_problems(response, observed["response"])
    if observed["calls"] != expected["calls"]:
        problems.append(f"calls {observed['calls']!r}, expected {expected['calls']!r}")
    if observed["store"] != expected["store"]:
        problems.append(f"store {observed['store']!r}, expected {expected['store']!r}")
    return problems
