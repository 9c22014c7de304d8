"""What every limit kind (rate-limiting algorithm) provides: the :class:`LimitKind` seam.

A kind is written once, here in Python, and once per script branch in Lua
(``lua/``, which must keep its own copy of the rule). Everything else asks the
kind: validation its problems, the plans its script arguments and headers, the
engine its reading of a reply, the in-process simulations (the local failure
modes, the rejected-keys cache, rehearsal, the impact replay) its shape, and
the diff the direction of a change. ``docs/limit-kinds.md`` says how to add one.

The state a simulation works on is the integer the kind's script replies for
each key after its ``fits`` flag (for GCRA: the debt, µs of refill owed).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple, Protocol

__all__ = ["Advertised", "Counted", "Direction", "LimitKind", "Shape"]


class Direction(StrEnum):
    """Which way a change of one limit moves a client (notice and approval follow it)."""

    RAISED = "raised"
    LOWERED = "lowered"
    UNCHANGED = "unchanged"


class Advertised(NamedTuple):
    """How a limit appears in ``RateLimit-Policy``."""

    name: str  #: the policy item's name, e.g. ``user-s``
    quota: int  #: IETF ``q``: requests' worth the limit holds
    window: int  #: IETF ``w``: whole seconds over which ``quota`` applies


class Shape(Protocol):
    """A limit in its script's units for one request cost: what simulations run.

    ``state`` is the integer the script replies for the key (see the module).
    """

    def fits(self, state: int) -> bool:
        """Whether one more request fits a key in ``state``."""
        ...

    def charged(self, state: int) -> int:
        """The state once one request that fits is charged."""
        ...

    def remaining(self, state: int) -> int:
        """Whole requests' worth left in a key in ``state``."""
        ...

    def wait(self, state: int) -> int:
        """µs until a request fits a key in ``state`` (0 when it fits now)."""
        ...

    def waiting(self, wait: int) -> int:
        """The state of a key where a request waits ``wait`` µs (> 0): :meth:`wait`
        undone, for the reject cache's answer (the cache keeps the moment)."""
        ...

    def reset(self, state: int, now: int) -> int:
        """µs until a key in ``state`` is back to its full allowance; ``now`` is the
        reply's Redis time, µs (a calendar quota resets at its period's end)."""
        ...


class Counted:
    """The arithmetic of a kind that counts requests (a sliding window, a calendar
    quota) with its state in ticks: read as a GCRA debt of ``increment = cost x
    tick`` and ``capacity = limit x tick``, which is how the simulations and the
    nginx module run it. A frozen dataclass with ``cost``, ``limit`` and ``tick``
    mixes it in and writes its own ``reset``.
    """

    __slots__ = ()
    cost: int  #: requests' worth one request adds
    limit: int  #: requests' worth the key admits
    tick: int  #: µs per request's worth in the state

    def fits(self, state: int) -> bool:
        """Whether a request fits a key whose state is ``state``."""
        return state <= (self.limit - self.cost) * self.tick

    def charged(self, state: int) -> int:
        """The state once one request that fits is charged (the simulations' bucket)."""
        return state + self.cost * self.tick

    def remaining(self, state: int) -> int:
        """Whole requests' worth left."""
        left = (self.limit * self.tick - state) // self.tick
        return left if left > 0 else 0

    def wait(self, state: int) -> int:
        """µs until a request fits (exact for a script's rejection)."""
        wait = state - (self.limit - self.cost) * self.tick
        return wait if wait > 0 else 0

    def waiting(self, wait: int) -> int:
        """The state of a key where a request waits ``wait`` µs (``wait``'s inverse)."""
        return wait + (self.limit - self.cost) * self.tick


class LimitKind(Protocol):
    """One rate-limiting algorithm, as every part of Sluice outside its script sees it.

    ``limit_type`` is the frozen dataclass of the kind's limits (the snapshot's
    value type); the methods take instances of it. Kinds are registered with
    :func:`sluice.kinds.register`, and found by the type of a limit.
    """

    name: str  #: the kind's name in the format and the docs, e.g. ``gcra``
    limit_type: type[Any]  #: the value type of its limits

    def parse(self, data: Any, path: str) -> Any:
        """The limit in ``data``, its snapshot JSON (``to_json``, ``kind`` member
        included); :class:`~sluice.errors.SnapshotError` names a bad member by its
        path (``path`` + ``.member``). Read with :mod:`sluice.reading`."""
        ...

    def problems(self, limit: Any, *, cost: int) -> list[tuple[str, str]]:
        """(member suffix, message) for each reason ``limit`` cannot be enforced for
        requests of ``cost`` (e.g. ``(".burst", "...")``); empty when it can."""
        ...

    def shape(self, limit: Any, *, cost: int, share: int = 1) -> Shape:
        """``limit`` in script units for requests of ``cost``; ``share`` divides it
        (a gateway's part of the limit in the ``local`` failure mode)."""
        ...

    def arguments(self, shape: Any, *, flag: bytes) -> tuple[bytes, ...]:
        """The script's ARGV for one limit of ``shape``; ``flag`` is the script's
        role of the limit (``b"0"`` enforced, ``b"1"`` shadow, see ``lua/``)."""
        ...

    def advertised(self, limit: Any, shape: Any) -> Advertised:
        """The limit's ``RateLimit-Policy`` item."""
        ...

    def noun(self, limit: Any) -> str:
        """What customers call a limit of the kind, before its subject: ``Rate
        limit`` (per user), ``Monthly quota`` (per account); its default public name."""
        ...

    def terse(self, limit: Any) -> str:
        """``limit`` for the people who set limits, after its subject (the admin,
        the diff): ``100 / s, burst 200``; its cost and options included."""
        ...

    def in_words(self, limit: Any, subject: str) -> str:
        """``limit`` as customers read it, given its ``subject`` (``per user``): the
        429's detail, the changelog, ``100 requests per second per user, bursts of
        5``; the request cost is added by the caller."""
        ...

    def direction(self, before: Any, after: Any, *, route_cost: int) -> Direction:
        """Which way changing ``before`` into ``after`` (same subject) moves a client:
        any move against the client is a lowering, even if another member rose."""
        ...
