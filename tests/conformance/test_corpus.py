"""The corpus is what the Python model does, and the Python client passes it, sync and asyncio.

``test_corpus__regenerated__matches_the_checked_in_file`` runs the generator
(the sync client on a fresh Redis) and compares with ``corpus.json``: a
change to the model (keys, script arguments, decisions, headers) fails here
until the corpus is regenerated, and then fails every other implementation
that does not mirror it (``test_service.py``, ``test_nginx_module.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.conformance import corpus, observe
from tests.conformance.generate import generate
from tests.conformance.runners import PythonClient, run_scenario
from tests.servers import free_port


def corpus_problems(document: dict[str, Any]) -> list[str]:
    """How a freshly generated corpus differs from the checked-in one."""
    problems = []
    if document["snapshot_hash"] != corpus.snapshot().hash:
        problems.append("the snapshot of rules.json changed")
    if document["scheduled_hash"] != corpus.scheduled().hash:
        problems.append("the scheduled snapshot changed")
    checked_in = {s["name"]: s for s in corpus.corpus()}
    fresh = {s["name"]: s for s in document["scenarios"]}
    if set(checked_in) != set(fresh):
        problems.append(f"scenarios differ: {sorted(set(checked_in) ^ set(fresh))}")
    for name in set(checked_in) & set(fresh):
        problems += scenario_problems(checked_in[name], fresh[name]["steps"])
        for index, (want, got) in enumerate(
            zip(checked_in[name]["steps"], fresh[name]["steps"], strict=False)
        ):
            if want["arguments"] != got["arguments"]:
                problems.append(f"{name} step {index}: arguments {got['arguments']}")
            if want["expect"]["event"] != got["expect"]["event"]:
                problems.append(f"{name} step {index}: event {got['expect']['event']}")
    return problems


def scenario_problems(
    expected: dict[str, Any], observed: list[dict[str, Any]]
) -> list[str]:
    """Every way the ``observed`` steps differ from the ``expected`` scenario's."""
    name, steps = expected["name"], expected["steps"]
    if len(observed) != len(steps):
        return [f"{name}: {len(observed)} steps, expected {len(steps)}"]
    return [
        f"{name} step {index} ({want['request']['method']} {want['request']['target']}): {problem}"
        for index, (want, got) in enumerate(zip(steps, observed, strict=True))
        for problem in corpus.step_problems(
            want["expect"], got["expect"], head=want["request"]["method"] == "HEAD"
        )
    ]


def test_corpus__regenerated__matches_the_checked_in_file(redis_server):
    # Given the rules, the scenarios and an empty Redis
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    # When the sync client runs them again
    document = generate(redis_server.url)
    # Then it does what corpus.json says, within the documented tolerance
    assert corpus_problems(document) == []


@pytest.fixture
def monitored(redis_server, redis_client):
    monitor = observe.Monitor(redis_server.port)
    yield redis_client, monitor
    monitor.close()


def test_corpus__asyncio_client__passes(redis_server, monitored):
    # Given the asyncio client on the scenarios' Redis (a dead one for "down")
    client, monitor = monitored
    runner = PythonClient(redis_server.url, asynchronous=True)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    problems, events = [], []
    try:
        for scenario in corpus.corpus():
            runner.start(scenario, dead if scenario.get("redis") == "down" else None)
            runner.events.clear()
            # When it decides each step
            observed = run_scenario(
                scenario,
                runner.decide,
                client=client,
                monitor=monitor,
                expected=scenario["steps"],
            )
            problems += scenario_problems(scenario, observed)
            events += runner.events
    finally:
        runner.shutdown()
    # Then every answer, script call, key and decision is the corpus'
    assert problems == []
    assert [corpus.event_key(e) for e in events] == [
        corpus.event_key(step["expect"]["event"])
        for scenario in corpus.corpus()
        for step in scenario["steps"]
    ]
