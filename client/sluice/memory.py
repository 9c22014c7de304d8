"""An in-process store: the client's Redis scripts as Python, for tests and one-process apps.

``Limiter("memory://", rules)`` or ``Limiter(MemoryStore(), rules)`` (and the
same for :class:`~.aio.AsyncLimiter`) decide with the same keys, arguments and
replies as on Redis: each method of :class:`MemoryStore` is one of the scripts
in ``lua/`` (``token_bucket``, ``hot``, ``release``, ``charge``), line for line,
down to Redis's millisecond key expiry. The conformance corpus holds it to the
Redis decisions (``tests/conformance``).

What it is not: shared. Each process has its own buckets, so N processes admit
N times the rate. Use it for tests, local development and single-process apps;
use Redis when more than one process enforces the same limits.

Time is ``clock`` (epoch seconds, ``time.time`` by default), which stands for
Redis's ``TIME``: a test moves it to refill buckets without sleeping
(:mod:`.testing`). A lock makes each call atomic, as a script is on Redis.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .bucket import SCRIPT
from .kinds.gcra import admits
from .kinds.quota import Quota, quota_shape, quota_state
from .kinds.sliding import Sliding, sliding_count, sliding_state
from .scripts import CHARGE, HOT, RELEASE

__all__ = [
    "MEMORY_URL",
    "AsyncMemoryScript",
    "MemoryScript",
    "MemoryStore",
    "memory_store",
]

#: The URL limiters take for a new :class:`MemoryStore`.
MEMORY_URL = "memory://"
#: a script: keys, arguments (text), the time of the call (µs) -> the reply
_Run = Callable[[list[str], list[str], int], Any]
_SWEEP_EVERY = 10_000  #: writes between two sweeps of expired keys


def memory_store(url: str) -> MemoryStore | None:
    """A new store for a limiter given ``"memory://"``; None for another URL."""
    if not url.startswith(MEMORY_URL):
        return None
    if url != MEMORY_URL:
        raise ValueError(f"{url!r}: the memory store takes no options")
    return MemoryStore()


@dataclass(slots=True)
class _Window:
    """A sliding window read by the script's first loop, decided by its second."""

    key: str
    shape: Sliding
    previous: int
    current: int
    number: int  #: the window's number: now // window
    elapsed: int  #: µs into the window

    def fits(self) -> bool:
        count = sliding_count(self.shape, self.previous, self.current, self.elapsed)
        return count + self.shape.cost <= self.shape.limit

    def decide(self, store: MemoryStore, charge: bool, now: int) -> int:
        """Charge it when ``charge``; return its state after the decision."""
        if charge:
            self.current += self.shape.cost
            expiry = math.ceil((self.number + 2) * self.shape.window / 1000)
            store._hcharge(self, expiry, now)
        return sliding_state(self.shape, self.previous, self.current, self.elapsed)


@dataclass(slots=True)
class _Quota:
    """A calendar quota read by the script's first loop, decided by its second."""

    key: str
    shape: Quota  #: of the caller's period (its tick)
    used: int
    start: int  #: the period's, epoch s (the caller's, or as Redis time moved it)
    end: int
    same: bool  #: whether the key holds this period's count

    def fits(self) -> bool:
        return self.used + self.shape.cost <= self.shape.limit

    def decide(self, store: MemoryStore, charge: bool, now: int) -> int:
        """Charge it when ``charge``; return its state after the decision."""
        if charge:
            fields = store._hget(self.key, now)
            if self.same:
                fields["n"] = fields.get("n", 0) + self.shape.cost
            else:  # the period's first charge: HSET p n, PEXPIREAT its end
                store._hashes[self.key] = (
                    {"p": self.start, "n": self.shape.cost},
                    self.end * 1000,
                )
            self.used += self.shape.cost
        return quota_state(self.shape, self.used, self.end, now)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class MemoryStore:
    """Buckets and concurrency slots in this process, behind the scripts' contract."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        #: bucket key -> (TAT in µs, expiry in ms): SET ... PX
        self._values: dict[str, tuple[int, int]] = {}
        #: sliding window key -> (window number -> count, expiry in ms), calendar
        #: quota key -> ({"p": period start, "n": count}, expiry in ms): a hash
        self._hashes: dict[str, tuple[dict[Any, int], int]] = {}
        #: slot key -> (member -> score in ms, expiry in ms or None): a sorted set
        self._sets: dict[str, tuple[dict[str, int], int | None]] = {}
        self._writes = 0
        self._scripts: dict[bytes, _Run] = {
            SCRIPT: self._token_bucket,
            HOT: self._hot,
            RELEASE: self._release,
            CHARGE: self._charge,
        }

    def script(self, source: bytes) -> MemoryScript:
        """The script of ``source`` (one of ``lua/``) on this store."""
        return MemoryScript(self, self._scripts[source])

    def async_script(self, source: bytes) -> AsyncMemoryScript:
        """:meth:`script` for an asyncio limiter (awaited replies)."""
        return AsyncMemoryScript(self, self._scripts[source])

    def run(
        self, run: Callable[..., Any], keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run one script atomically at one instant, as Redis runs EVALSHA."""
        with self._lock:
            return run(list(keys), [_text(a) for a in args], self._now())

    def keys(self) -> dict[str, Any]:
        """Every live key: a bucket's TAT (µs), a window's counts, a slot's members
        (for tests and debugging)."""
        with self._lock:
            now_ms = self._now() // 1000
            found: dict[str, Any] = {
                k: v for k, (v, until) in self._values.items() if now_ms <= until
            }
            for key, (fields, expiry) in self._hashes.items():
                if now_ms <= expiry:
                    found[key] = dict(fields)
            for key, (members, until) in self._sets.items():
                if members and (until is None or now_ms <= until):
                    found[key] = dict(members)
            return found

    def flush(self) -> None:
        """Forget every key (``FLUSHDB``)."""
        with self._lock:
            self._values.clear()
            self._hashes.clear()
            self._sets.clear()

    def close(self) -> None:
        """Nothing to close (limiters call it as on a Redis client)."""

    async def aclose(self) -> None:
        """Nothing to close (asyncio limiters call it as on a Redis client)."""

    def time(self) -> tuple[int, int]:
        """The store's clock as Redis answers ``TIME``: (seconds, microseconds). The
        limiters read it once, when made, for the rules' times (one clock)."""
        now = self._now()
        return now // 1_000_000, now % 1_000_000

    # -- Redis commands, as the scripts use them --------------------------------------

    def _now(self) -> int:
        return int(self._clock() * 1_000_000)  # TIME, in µs

    def _get(self, key: str, now: int) -> int | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        if now // 1000 > entry[1]:  # Redis: expired once its ms clock passes the expiry
            del self._values[key]
            return None
        return entry[0]

    def _set(self, key: str, value: int, px: int, now: int) -> None:
        self._values[key] = (value, now // 1000 + px)
        self._writes += 1
        if self._writes % _SWEEP_EVERY == 0:
            self._sweep(now // 1000)

    def _sweep(self, now_ms: int) -> None:
        """Drop expired keys, as Redis's active expiry does: memory follows active clients."""
        for key in [k for k, (_, until) in self._values.items() if now_ms > until]:
            del self._values[key]
        for key in [k for k, (_, until) in self._hashes.items() if now_ms > until]:
            del self._hashes[key]
        for key in [
            k
            for k, (_, until) in self._sets.items()
            if until is not None and now_ms > until
        ]:
            del self._sets[key]

    def _members(self, key: str, now_ms: int) -> dict[str, int]:
        entry = self._sets.get(key)
        if entry is not None and entry[1] is not None and now_ms > entry[1]:
            del self._sets[key]
            entry = None
        return {} if entry is None else entry[0]

    def _zset(self, key: str, members: dict[str, int], expiry: int | None) -> None:
        if members:
            self._sets[key] = (members, expiry)
        else:  # Redis deletes an emptied set, and its expiry with it
            self._sets.pop(key, None)

    # -- the scripts --------------------------------------------------------------------

    def _token_bucket(self, keys: list[str], argv: list[str], now: int) -> list[int]:
        """``lua/token_bucket.lua``: GCRA buckets, sliding windows (:meth:`_window`)
        and calendar quotas (:meth:`_quota`)."""
        debts: list[int] = []
        fits: list[int | None] = []
        windows: dict[int, _Window | _Quota] = {}
        admitted = rehearsed = 1
        for i, key in enumerate(keys):
            increment, capacity = int(argv[3 * i]), int(argv[3 * i + 1])
            kind = argv[3 * i + 2]
            if len(kind) > 1:  # "q": a calendar quota, "w": a sliding window
                read = self._quota if kind[1] == "q" else self._window
                windows[i] = counted = read(key, argv[3 * i : 3 * i + 3], now)
                ok, debt = counted.fits(), 0
            else:
                tat = self._get(key, now)
                debt = tat - now if tat is not None and tat > now else 0
                ok = admits(debt, increment, capacity)
            if ok:
                fits.append(0 if i in windows else debt + increment)
            else:
                fits.append(None)
                admitted, rehearsed = _misfit(kind[0], admitted, rehearsed)
            debts.append(debt)
        reply = [admitted]
        for i, key in enumerate(keys):
            debt, fit = debts[i], fits[i]
            charged = rehearsed if argv[3 * i + 2][0] == "2" else admitted
            if i in windows:
                debt = windows[i].decide(self, charged == 1 and fit is not None, now)
            elif charged == 1 and fit is not None:
                debt = fit
                self._set(key, now + debt, math.ceil(debt / 1000), now)
            reply += [1 if fit is not None else 0, debt]
        return [*reply, now]

    def _window(self, key: str, argv: list[str], now: int) -> _Window:
        """A sliding window's counts at ``now`` (``HMGET`` of its two fields)."""
        cost, limit, flag = int(argv[0]), int(argv[1]), argv[2]
        window = int(flag[2:])
        number = math.floor(now / window)  # as Lua divides: in doubles
        fields = self._hget(key, now)
        shape = Sliding(cost, limit, window, math.ceil(window / limit))
        return _Window(
            key,
            shape,
            fields.get(number - 1, 0),
            fields.get(number, 0),
            number,
            now - number * window,
        )

    def _quota(self, key: str, argv: list[str], now: int) -> _Quota:
        """A calendar quota's count at ``now`` (``HMGET p n``), of the period Redis
        time is in (the script's ``quota``)."""
        cost, limit, flag = int(argv[0]), int(argv[1]), argv[2]
        start, end, after = (int(part) for part in flag[2:].split(":"))
        shape = quota_shape(limit, cost, (start, end, after))
        fields = self._hget(key, now)
        held = fields.get("p")
        if now >= end * 1_000_000:
            start, end = end, after
        elif held is not None and held < start and now < start * 1_000_000:
            start, end = held, start
        if held == start:
            return _Quota(key, shape, fields.get("n", 0), start, end, True)
        return _Quota(key, shape, 0, start, end, False)

    def _hget(self, key: str, now: int) -> dict[Any, int]:
        entry = self._hashes.get(key)
        if entry is None:
            return {}
        if now // 1000 > entry[1]:
            del self._hashes[key]
            return {}
        return entry[0]

    def _hcharge(self, window: _Window, expiry_ms: int, now: int) -> None:
        """HINCRBY this window's field; on the window's first charge, HDEL the one of
        two windows ago and PEXPIREAT (a live key's fields are changed in place)."""
        fields = self._hget(window.key, now)
        count = fields[window.number] = fields.get(window.number, 0) + window.shape.cost
        if count == window.shape.cost:
            fields.pop(window.number - 2, None)
            self._hashes[window.key] = (fields, expiry_ms)

    def _hot(self, keys: list[str], argv: list[str], now: int) -> list[int]:
        """``lua/hot.lua``: buckets with leases, then concurrency slots."""
        now_ms = now // 1000
        m = int(argv[1])
        admitted = rehearsed = 1
        debts, grants, fits = [], [], []
        for i in range(m):
            base = 4 * i + 2
            increment, capacity = int(argv[base]), int(argv[base + 1])
            want = int(argv[base + 3])
            tat = self._get(keys[i], now)
            debt = tat - now if tat is not None and tat > now else 0
            granted = min(want, (capacity - debt) // increment)
            fit = want == 0 or granted >= 1
            kind = argv[base + 2]
            if not fit:
                admitted, rehearsed = _misfit(kind, admitted, rehearsed)
            debts.append(debt)
            grants.append(max(granted, 0))
            fits.append(fit)
        slots = len(keys) - m
        counts, room, sets = [], [], []
        for j in range(slots):
            key, base = keys[m + j], 2 + 4 * m + 3 * j
            members = {
                k: v for k, v in self._members(key, now_ms).items() if v > now_ms
            }
            self._zset(key, members, self._sets.get(key, ({}, None))[1])
            sets.append(members)
            counts.append(len(members))
            room.append(len(members) < int(argv[base]))
            if not room[j] and argv[base + 2] != "1":
                admitted = 0
        reply = [admitted]
        for i in range(m):
            debt, granted = debts[i], grants[i]
            charged = rehearsed if argv[4 * i + 4] == "2" else admitted
            if charged == 1 and fits[i] and granted > 0:
                debt += granted * int(argv[4 * i + 2])
                self._set(keys[i], now + debt, math.ceil(debt / 1000), now)
            else:
                granted = 0
            reply += [1 if fits[i] else 0, debt, granted]
        for j in range(slots):
            key, base = keys[m + j], 2 + 4 * m + 3 * j
            count = counts[j]
            if admitted == 1 and room[j]:
                self._slot_add(key, sets[j], argv[0], now_ms, int(argv[base + 1]))
                count += 1
            reply += [1 if room[j] else 0, count]
        return [*reply, now]

    def _slot_add(
        self, key: str, members: dict[str, int], member: str, now_ms: int, timeout: int
    ) -> None:
        """ZADD, then PEXPIRE when the key would live less than ``timeout`` ms."""
        expiry = self._sets.get(key, ({}, None))[1]
        members[member] = now_ms + timeout
        left = -1 if expiry is None else expiry - now_ms  # PTTL
        self._zset(key, members, now_ms + timeout if left < timeout else expiry)

    def _release(self, keys: list[str], argv: list[str], now: int) -> int:
        """``lua/release.lua``: ZREM the request id from each set."""
        removed = 0
        for key in keys:
            members = self._members(key, now // 1000)
            if argv[0] in members:
                del members[argv[0]]
                removed += 1
                self._zset(key, members, self._sets[key][1])
        return removed

    def _charge(self, keys: list[str], argv: list[str], now: int) -> int:
        """``lua/charge.lua``: add what was admitted without the store, capped."""
        for i, key in enumerate(keys):
            tat = self._get(key, now)
            if tat is None or tat < now:
                tat = now
            tat = min(tat + int(argv[2 * i]), now + 2 * int(argv[2 * i + 1]))
            self._set(key, tat, max(1, math.ceil((tat - now) / 1000)), now)
        return len(keys)


def _misfit(kind: str, admitted: int, rehearsed: int) -> tuple[int, int]:
    """(admitted, rehearsed) once a bucket of ``kind`` did not fit, as both scripts
    say: "0" enforced, "1" shadow (never rejects), "2" rehearsed only, "3" both."""
    if kind == "2":
        return admitted, 0
    if kind == "3":
        return 0, 0
    if kind != "1":
        return 0, rehearsed
    return admitted, rehearsed


class MemoryScript:
    """A script on a :class:`MemoryStore`, called as a :class:`~.scripts.Script` is."""

    def __init__(self, store: MemoryStore, run: _Run) -> None:
        self.client = store  #: what it runs on, as a Redis script's ``client``
        self._run = run

    def __call__(self, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self.client.run(self._run, keys, args)

    def close(self) -> None:
        """Nothing to close."""


class AsyncMemoryScript(MemoryScript):
    """A script on a :class:`MemoryStore`, called as an :class:`~.scripts.AsyncScript` is:
    the reply is ready at once, so ``deadline`` never passes."""

    def __call__(
        self, keys: Sequence[str], args: Sequence[Any], deadline: float | None = None
    ) -> Awaitable[Any]:
        return _ready(self.client.run(self._run, keys, args))


async def _ready(value: Any) -> Any:
    return value
