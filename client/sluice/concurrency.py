"""Concurrency limits: statuses of in-flight slots, request ids, and the in-process fallback.

In Redis, each concurrency key is a sorted set of the requests in flight, scored
by the Redis time (ms) at which an entry expires if it is never released
(``hot.lua`` acquires, ``release.lua`` releases). A gateway that crashes leaves
its entries behind; they stop counting ``timeout`` seconds after they were
taken, so the cap heals by itself.

When Redis is unavailable and the route fails ``local``, :class:`LocalSlots`
counts in process with ``1/gateways`` of each cap (at least one), like
:class:`~.failure.LocalBuckets` does for buckets (``open``: the whole cap).

A call that failed after it was sent may still have run in Redis: its reply
was late or lost. Its request id may then sit in the in-flight sets although
the gateway decided without it. Such ids, and releases that failed, are
released in the background (:mod:`.backlog`) until Redis confirms.
"""

from __future__ import annotations

import itertools
import secrets
import threading

from .decision import LimitStatus
from .plans import PolicyPlan

__all__ = ["SLOT_RETRY_AFTER", "LocalSlots", "RequestIds", "slot_statuses"]

#: Seconds a client rejected by a concurrency limit is told to wait: a slot can
#: free at any moment, so the hint is short.
SLOT_RETRY_AFTER = 1.0


def slot_statuses(
    plan: PolicyPlan, keys: tuple[str, ...], reply: list[int], offset: int
) -> tuple[LimitStatus, ...]:
    """Statuses of the slots from ``reply[offset:]``: (fits, in flight after) per slot."""
    statuses = []
    for index, slot in enumerate(plan.slots):
        at = offset + 2 * index
        fits, count = reply[at] == 1, reply[at + 1]
        most = slot.limit.max_inflight
        statuses.append(
            LimitStatus(
                slot.limit,
                slot.name,
                keys[index],
                most,
                0,
                fits,
                max(0, most - count),
                0.0,
                0.0 if fits else SLOT_RETRY_AFTER,
            )
        )
    return tuple(statuses)


class RequestIds:
    """Unique ids for slot entries: a random prefix per process and a counter."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6) + ":"
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return self._prefix + str(next(self._counter))


class LocalSlots:
    """In-process slots for the ``local`` failure mode: ``1/gateways`` of each cap."""

    def __init__(self, *, gateways: int = 4) -> None:
        if gateways < 1:
            raise ValueError("gateways must be at least 1")
        self.gateways = gateways
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(
        self, plan: PolicyPlan, keys: tuple[str, ...], *, share: int | None = None
    ) -> list[int]:
        """Take a slot of every cap that has room; a reply in the script's slot shape.

        Returns ``[admitted, then per slot: fits, in flight after]``; nothing is
        taken unless every enforcing slot has room. ``share``: divide each cap
        by this instead of ``gateways`` (1: the whole cap, the ``open`` mode).
        """
        parts = self.gateways if share is None else share
        with self._lock:
            counts = [self._counts.get(key, 0) for key in keys]
            room = [
                count < max(1, slot.limit.max_inflight // parts)
                for count, slot in zip(counts, plan.slots, strict=True)
            ]
            admitted = all(
                ok
                for ok, slot in zip(room, plan.slots, strict=True)
                if not slot.limit.shadow
            )
            reply = [int(admitted)]
            for key, count, ok in zip(keys, counts, room, strict=True):
                if admitted and ok:
                    count = self._counts[key] = count + 1
                reply += [int(ok), count]
            return reply

    def release(self, keys: tuple[str, ...]) -> None:
        with self._lock:
            for key in keys:
                count = self._counts.get(key, 0) - 1
                if count > 0:
                    self._counts[key] = count
                else:
                    self._counts.pop(key, None)

    def share(self, most: int) -> int:
        """This gateway's part of a cap of ``most``: never below one request."""
        return max(1, most // self.gateways)
