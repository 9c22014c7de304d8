"""Running the corpus' scenarios against an implementation, and the Python client's runners.

:func:`run_scenario` drives any implementation through one scenario and
observes each step as :mod:`.corpus` says; an implementation is a ``decide``
function from a request (and the limiter arguments the model reads from it)
to the :class:`~.corpus.Answer` its client got. :class:`PythonClient` is the
sync and asyncio client, the model itself (``generate.py`` records what it does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import redis

from sluice import AsyncLimiter, Limiter
from sluice.bucket import connect_async
from sluice.decision import Decision, Outcome
from sluice.headers import error_response, rate_limit_headers
from sluice.validation import policy_ref
from tests.conformance import corpus, observe
from tests.conformance.corpus import Answer, Decide
from tests.conformance.observe import Monitor

#: the Redis timeout of the runners' limiters: generous, so that no decision of
#: a healthy Redis is degraded by a slow machine (a dead one refuses at once)
REDIS_TIMEOUT = 5.0


def run_scenario(
    scenario: dict[str, Any],
    decide: Decide,
    *,
    client: redis.Redis,
    monitor: Monitor,
    expected: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Each step of ``scenario`` as observed: the request, the arguments, the answer,
    the deciding script calls and the store after it. With ``expected`` steps, the
    store is awaited until it matches (background work such as releases may lag)."""
    observe.reset(client, scenario)
    monitor.commands()
    steps = []
    for index, request in enumerate(corpus.expand(scenario)):
        arguments = corpus.limiter_arguments(request)
        answer = decide(request, arguments)
        calls = monitor.calls()
        if expected is None:
            found = observe.store(client)
        else:
            found = observe.wait_store(client, expected[index]["expect"]["store"])
        steps.append(
            {
                "request": request,
                "arguments": arguments,
                "expect": {
                    "response": corpus.rendered(answer),
                    "calls": calls,
                    "store": found,
                },
            }
        )
    return steps


def decision_event(arguments: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """The decision event of ``decision`` (:mod:`sluice.metrics`), without its time."""
    limited = decision.outcome is Outcome.LIMITED and decision.deciding is not None
    return {
        "tenant": arguments["tenant"] or "",
        "route": decision.route or "",
        "policy": policy_ref(decision.policy),
        "version": decision.snapshot_version,
        "outcome": decision.outcome.value,
        "limit": decision.deciding.name if limited and decision.deciding else "",
        "rehearsed": list(decision.rehearsed) if decision.rehearsed else None,
    }


def answer_of(decision: Decision) -> Answer:
    """What a Python middleware answers for ``decision``."""
    if decision.allowed:
        return Answer(200, {k.lower(): v for k, v in rate_limit_headers(decision)}, b"")
    response = error_response(decision)
    return Answer(
        response.status, {k.lower(): v for k, v in response.headers}, response.body
    )


class PythonClient:
    """The client library, sync or asyncio, deciding with the corpus' snapshot.

    Each scenario gets a limiter of its own: what one remembers (the reject
    cache, local buckets) is per process, and a gateway process sees every
    scenario's keys once. ``events`` collects each decision's event.
    """

    def __init__(self, redis_url: str, *, asynchronous: bool = False) -> None:
        self.redis_url = redis_url
        self.asynchronous = asynchronous
        self.events: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop() if asynchronous else None
        self._limiter: Limiter | AsyncLimiter | None = None
        self.release = False

    def start(self, scenario: dict[str, Any], redis_url: str | None = None) -> None:
        """A fresh limiter for ``scenario`` (on ``redis_url`` when given)."""
        self.close()
        url = redis_url or self.redis_url
        self.release = bool(scenario.get("release"))
        if self._loop is None:
            self._limiter = Limiter(url, corpus.bundle(), timeout=REDIS_TIMEOUT)
        else:
            client = connect_async(url, timeout=REDIS_TIMEOUT)
            self._limiter = self._loop.run_until_complete(_async_limiter(client))

    def decide(self, request: dict[str, Any], arguments: dict[str, Any]) -> Answer:
        limiter = self._limiter
        if isinstance(limiter, AsyncLimiter):
            assert self._loop is not None
            decision = self._loop.run_until_complete(limiter.decide(**arguments))
            if self.release:
                self._loop.run_until_complete(limiter.release(decision))
        else:
            assert isinstance(limiter, Limiter)
            decision = limiter.decide(**arguments)
            if self.release:
                limiter.release(decision)
        self.events.append(decision_event(arguments, decision))
        return answer_of(decision)

    def close(self) -> None:
        limiter, self._limiter = self._limiter, None
        if isinstance(limiter, AsyncLimiter):
            assert self._loop is not None
            self._loop.run_until_complete(limiter.aclose())
        elif limiter is not None:
            limiter.bucket.close()

    def shutdown(self) -> None:
        self.close()
        if self._loop is not None:
            self._loop.close()


async def _async_limiter(client: Any) -> AsyncLimiter:
    """Made inside the loop: its pipelining binds to the running loop."""
    return AsyncLimiter(client, corpus.bundle())


def run_corpus(
    decide: Callable[[dict[str, Any]], Decide | None],
    *,
    client: redis.Redis,
    monitor: Monitor,
) -> tuple[list[str], list[str]]:
    """Run every corpus scenario with ``decide(scenario)``'s implementation (None:
    skipped); return the problems found and the names of the skipped scenarios."""
    from tests.conformance.test_corpus import scenario_problems

    problems: list[str] = []
    skipped: list[str] = []
    for scenario in corpus.corpus():
        implementation = decide(scenario)
        if implementation is None:
            skipped.append(scenario["name"])
            continue
        observed = run_scenario(
            scenario,
            implementation,
            client=client,
            monitor=monitor,
            expected=scenario["steps"],
        )
        problems += scenario_problems(scenario, observed)
    return problems, skipped
