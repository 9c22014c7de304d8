"""The memory store passes the corpus: the same answers, script calls, keys and
decision events as Redis, sync and asyncio, without a Redis server.

Its script calls and keys are observed from the store itself, normalized as
:mod:`.observe` normalizes MONITOR's. The scenarios of a Redis that is down are
skipped: a store in the process never fails.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sluice import AsyncLimiter, Limiter
from sluice.memory import MemoryStore
from tests.conformance import corpus, observe
from tests.conformance.runners import answer_of, decision_event
from tests.conformance.test_corpus import scenario_problems

_NAMES = {"_token_bucket": "token_bucket", "_hot": "hot"}


class RecordingStore(MemoryStore):
    """A memory store that notes its deciding script calls as MONITOR shows Redis's."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def run(self, run, keys, args):
        name = _NAMES.get(run.__name__)
        if name is not None:
            argv = [a.decode() if isinstance(a, bytes) else a for a in args]
            argv = observe.normal_argv(name, argv)
            keys_ = [observe.normal_key(k) for k in keys]
            self.calls.append({"script": name, "keys": keys_, "argv": argv})
        return super().run(run, keys, args)

    def seed(self, command: list[Any]) -> None:
        """The scenario's seed: ``ZADD key score member ...`` (the only kind it has)."""
        assert command[0] == "ZADD"
        pairs = command[2:]
        members = {str(pairs[i + 1]): int(pairs[i]) for i in range(0, len(pairs), 2)}
        self._sets[command[1]] = (members, None)  # what ZADD leaves: no expiry

    def observed(self) -> list[str]:
        found = []
        for key, value in self.keys().items():
            # the observer counts a sorted set's members (a window's hash: not)
            zset = isinstance(value, dict) and key in self._sets
            found.append(observe.normal_key(f"{key}#{len(value)}" if zset else key))
        return sorted(found)


def run_memory(
    scenario: dict[str, Any], *, asynchronous: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each step of ``scenario`` on a fresh memory store, observed as the corpus observes Redis."""
    store = RecordingStore()
    for command in scenario.get("seed", ()):
        store.seed(command)
    loop = asyncio.new_event_loop() if asynchronous else None
    limiter = (
        AsyncLimiter(store, corpus.bundle())
        if loop
        else Limiter(store, corpus.bundle())
    )
    steps, events = [], []
    try:
        for request in corpus.expand(scenario):
            arguments = corpus.limiter_arguments(request)
            store.calls = []
            if loop is not None:
                decision = loop.run_until_complete(limiter.decide(**arguments))
                if scenario.get("release"):
                    loop.run_until_complete(limiter.release(decision))
            else:
                decision = limiter.decide(**arguments)
                if scenario.get("release"):
                    limiter.release(decision)
            events.append(decision_event(arguments, decision))
            expect = {
                "response": corpus.rendered(answer_of(decision)),
                "calls": store.calls,
                "store": store.observed(),
            }
            steps.append({"request": request, "arguments": arguments, "expect": expect})
    finally:
        if loop is not None:
            loop.close()
    return steps, events


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])
def test_corpus__memory_store__same_decisions_as_redis(asynchronous):
    # Given the corpus' scenarios of a Redis that answers
    scenarios = [s for s in corpus.corpus() if s.get("redis") != "down"]
    problems, events = [], []
    # When a limiter on a memory store decides each step
    for scenario in scenarios:
        observed, decided = run_memory(scenario, asynchronous=asynchronous)
        problems += scenario_problems(scenario, observed)
        events += decided
    # Then every answer, script call, key and decision event is Redis's
    assert problems == []
    assert [corpus.event_key(e) for e in events] == [
        corpus.event_key(step["expect"]["event"])
        for scenario in scenarios
        for step in scenario["steps"]
    ]
    assert len(scenarios) == len(corpus.corpus()) - 5  # only the five "Redis down"
