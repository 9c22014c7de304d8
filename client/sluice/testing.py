"""pytest fixtures for apps that use Sluice: a limiter on a memory store, and a clock you move.

Load them in your ``conftest.py``::

    pytest_plugins = ["sluice.testing"]

    @pytest.fixture
    def sluice_rules():
        return "rules.yaml"  # or a Snapshot, a Bundle, or Rules

then take ``sluice_limiter`` (a :class:`~.limiter.Limiter`; ``sluice_async_limiter``
for asyncio) and ``sluice_clock`` in a test. The limiter decides exactly as on
Redis (:mod:`.memory`), with no server; time only passes when the test says::

    def test_search__over_the_limit__429(client, sluice_clock):
        for _ in range(10):
            client.get("/search")
        assert client.get("/search").status_code == 429
        sluice_clock.advance(60)  # a minute later the bucket has refilled
        assert client.get("/search").status_code == 200

:func:`memory_limiter` makes one outside pytest (a script, a REPL).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any, Literal, overload

import pytest

from .aio import AsyncLimiter
from .bundle import Bundle
from .limiter import Limiter
from .memory import MemoryStore
from .rules import Rules
from .rulesfile import rules_from_file
from .snapshot import Snapshot

__all__ = [
    "Clock",
    "memory_limiter",
    "sluice_async_limiter",
    "sluice_clock",
    "sluice_limiter",
    "sluice_rules",
]

RulesLike = Snapshot | Bundle | Rules | str | os.PathLike[str]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Clock:
    """Epoch seconds that move only by :meth:`advance` (or by setting ``now``).

    One clock stands for every time a limiter reads: the store's (Redis's
    ``TIME``), the wall clock overrides expire by, and the monotonic one of
    its caches.
    """

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (buckets refill, slots and overrides expire)."""
        self.now += seconds


def _bundle(rules: RulesLike) -> Snapshot | Bundle:
    if isinstance(rules, Snapshot | Bundle):
        return rules
    if isinstance(rules, Rules):
        return Snapshot.build(
            version=1,
            parent=None,
            published_at=_EPOCH,
            effective_at=_EPOCH,
            rules=rules,
        )
    return rules_from_file(rules)


@overload
def memory_limiter(
    rules: RulesLike,
    *,
    clock: Clock | None = ...,
    asynchronous: Literal[False] = ...,
    **options: Any,
) -> Limiter: ...
@overload
def memory_limiter(
    rules: RulesLike,
    *,
    clock: Clock | None = ...,
    asynchronous: Literal[True],
    **options: Any,
) -> AsyncLimiter: ...
def memory_limiter(
    rules: RulesLike,
    *,
    clock: Clock | None = None,
    asynchronous: bool = False,
    **options: Any,
) -> Limiter | AsyncLimiter:
    """A limiter on a new :class:`~.memory.MemoryStore` deciding by ``rules`` (a
    snapshot, bundle, :class:`~.rules.Rules`, or a rules file's path), on
    ``clock`` for every time it reads when given. ``options`` go to the limiter."""
    if clock is not None:
        options = {"wall": clock, "clock": clock, **options}
    store = MemoryStore(clock=clock) if clock is not None else MemoryStore()
    if asynchronous:
        return AsyncLimiter(store, _bundle(rules), **options)
    return Limiter(store, _bundle(rules), **options)


@pytest.fixture
def sluice_rules() -> RulesLike:
    """The rules of ``sluice_limiter``: override it in your ``conftest.py``."""
    raise pytest.UsageError(
        "sluice.testing: define a `sluice_rules` fixture returning a rules file's "
        "path, a Snapshot, a Bundle or Rules"
    )


@pytest.fixture
def sluice_clock() -> Clock:
    """The time of the test's limiters, standing still until the test advances it."""
    return Clock()


@pytest.fixture
def sluice_limiter(sluice_rules: RulesLike, sluice_clock: Clock) -> Limiter:
    """A :class:`~.limiter.Limiter` on a fresh memory store, by ``sluice_rules``."""
    return memory_limiter(sluice_rules, clock=sluice_clock)


@pytest.fixture
def sluice_async_limiter(sluice_rules: RulesLike, sluice_clock: Clock) -> AsyncLimiter:
    """An :class:`~.aio.AsyncLimiter` on a fresh memory store, by ``sluice_rules``."""
    return memory_limiter(sluice_rules, clock=sluice_clock, asynchronous=True)
