"""The bundle a gateway receives (active and scheduled snapshots), and where limiters get rules.

A limiter asks a :class:`SnapshotProvider` for the snapshot in force on every
request, so ``current()`` must be cheap: :class:`Bundle` precomputes the next
switch time and answers with one comparison. The wire format is in
``docs/gateway-protocol.md``::

    {"active": {...snapshot...}, "scheduled": [{...snapshot...}, ...]}

Its bytes are signed by the control plane (:mod:`.signing`); :func:`verify_bundle_bytes`
checks the signature before anything is parsed, and the last-known-good file keeps
the bytes and the signature so that every read checks it again.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from .errors import SnapshotError
from .rules import fallback_rules
from .signing import KeyRing
from .snapshot import Snapshot

__all__ = [
    "Bundle",
    "SignedBundle",
    "SnapshotProvider",
    "StaticSource",
    "fallback_snapshot",
    "parse_bundle",
    "parse_bundle_bytes",
    "read_bundle_file",
    "verify_bundle_bytes",
    "write_bundle_file",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SnapshotProvider(Protocol):
    """Anything that hands a limiter the snapshot in force at ``now``.

    ``now`` (epoch seconds) is the limiter's clock for the rules, Redis's
    (:meth:`.limiter.LimiterCore.rules_time`); None: the provider's own. A
    provider may also offer ``upcoming(now=None) -> Snapshot | None``, the next
    scheduled snapshot: limiters then rehearse it (:mod:`.rehearsal`).
    """

    def current(self, now: float | None = None) -> Snapshot: ...


def fallback_snapshot() -> Snapshot:
    """Version 0: the built-in strict rules of a gateway that has no snapshot at all."""
    return Snapshot.build(
        version=0,
        parent=None,
        published_at=_EPOCH,
        effective_at=_EPOCH,
        rules=fallback_rules(),
    )


@dataclass(frozen=True, slots=True)
class Bundle:
    """The active snapshot and those published to take effect later, sorted by time."""

    active: Snapshot
    scheduled: tuple[Snapshot, ...] = ()
    _times: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.scheduled, key=lambda s: s.effective_at))
        object.__setattr__(self, "scheduled", ordered)
        object.__setattr__(
            self, "_times", tuple(s.effective_at.timestamp() for s in ordered)
        )

    def in_force(self, now: float) -> Snapshot:
        """The snapshot to enforce at ``now`` (epoch seconds): the latest one already effective."""
        if not self._times or now < self._times[0]:
            return self.active
        snapshot = self.active
        for moment, scheduled in zip(self._times, self.scheduled, strict=True):
            if moment > now:
                break
            snapshot = scheduled
        return snapshot

    def upcoming(self, now: float) -> Snapshot | None:
        """The next snapshot to take effect after ``now``: the one gateways rehearse."""
        return next(
            (s for t, s in zip(self._times, self.scheduled, strict=True) if t > now),
            None,
        )

    def in_force_since(self, now: float) -> float:
        """Epoch seconds from which :meth:`in_force` has held its answer for ``now``
        (minus infinity for the active snapshot)."""
        return max((t for t in self._times if t <= now), default=float("-inf"))

    def next_switch(self, now: float) -> float:
        """Epoch seconds of the next scheduled switch after ``now``; infinity if none."""
        return next((t for t in self._times if t > now), float("inf"))

    def to_json(self) -> dict[str, Any]:
        return {
            "active": self.active.to_json(),
            "scheduled": [s.to_json() for s in self.scheduled],
        }


def parse_bundle(data: Any) -> Bundle:
    """Parse and verify every snapshot of a bundle; raise SnapshotError naming the first fault."""
    if not isinstance(data, dict) or set(data) != {"active", "scheduled"}:
        raise SnapshotError("$", "a bundle is an object with 'active' and 'scheduled'")
    if not isinstance(data["scheduled"], list):
        raise SnapshotError("scheduled", "must be an array")
    active = _snapshot(data["active"], "active")
    scheduled = tuple(
        _snapshot(item, f"scheduled[{index}]")
        for index, item in enumerate(data["scheduled"])
    )
    for index, snapshot in enumerate(scheduled):
        if snapshot.version <= active.version:
            raise SnapshotError(
                f"scheduled[{index}].version",
                f"{snapshot.version} is not after the active version {active.version}",
            )
    return Bundle(active, scheduled)


def parse_bundle_bytes(raw: bytes) -> Bundle:
    """:func:`parse_bundle` of raw JSON bytes."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError("$", f"not valid JSON: {exc}") from None
    return parse_bundle(data)


def _snapshot(data: Any, path: str) -> Snapshot:
    try:
        return Snapshot.from_json(data)
    except SnapshotError as exc:
        raise SnapshotError(f"{path}.{exc.path}", exc.message) from None


@dataclass(frozen=True, slots=True)
class SignedBundle:
    """A verified bundle with the bytes its signature covers, as the cache file keeps it."""

    bundle: Bundle
    body: bytes  #: the bundle's bytes as served (before gzip): what is signed
    signature: str  #: ``<key id>:<base64>``, the ``Sluice-Signature`` header
    etag: str | None  #: the ETag it was served with


def verify_bundle_bytes(
    body: bytes, signature: str | None, keys: KeyRing, *, etag: str | None = None
) -> SignedBundle:
    """Check the signature over ``body``, then parse and verify the bundle; raise
    SnapshotError (path ``signature`` for a missing, unknown or wrong signature)."""
    keys.verify(body, signature)
    assert signature is not None  # verify refuses None
    return SignedBundle(parse_bundle_bytes(body), body, signature, etag)


def write_bundle_file(path: Path, signed: SignedBundle) -> None:
    """Write the last good bundle so that a crash never leaves a half-written file.

    The file is one line of JSON (``etag``, ``signature``), a newline, then the
    body exactly as served, so that the signature can be checked again on every
    read. The bytes go to a temporary file in the same directory, are fsynced,
    then renamed over ``path`` (atomic on POSIX), and the directory is fsynced so
    the rename itself survives a power cut.
    """
    head = json.dumps({"etag": signed.etag, "signature": signed.signature})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(head.encode("ascii") + b"\n" + signed.body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_bundle_file(path: Path, keys: KeyRing) -> SignedBundle:
    """Read what :func:`write_bundle_file` wrote and verify its signature and
    bundle; raise SnapshotError if it is not that, or not signed by ``keys``."""
    head, _, body = path.read_bytes().partition(b"\n")
    try:
        data = json.loads(head)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError("$", f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"etag", "signature"}:
        raise SnapshotError(
            "$",
            "not a signed Sluice bundle file (expects 'etag' and 'signature', "
            "then the bundle; a file written before bundles were signed is refused)",
        )
    etag, signature = data["etag"], data["signature"]
    if etag is not None and not isinstance(etag, str):
        raise SnapshotError("etag", "must be a string or null")
    if not isinstance(signature, str):
        raise SnapshotError("signature", "must be a string")
    return verify_bundle_bytes(body, signature, keys, etag=etag)


class StaticSource:
    """A provider over a fixed bundle (or one snapshot): tests, scripts, benchmarks.

    Scheduled snapshots still switch at their effective time: by the limiter's
    clock for the rules, or ``wall`` time when asked without one.
    """

    def __init__(
        self,
        rules: Snapshot | Bundle,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.bundle = rules if isinstance(rules, Bundle) else Bundle(rules)
        self._wall = wall

    def current(self, now: float | None = None) -> Snapshot:
        return self.bundle.in_force(self._wall() if now is None else now)

    def upcoming(self, now: float | None = None) -> Snapshot | None:
        """The next scheduled snapshot, rehearsed beside the one in force (see :mod:`.rehearsal`)."""
        return self.bundle.upcoming(self._wall() if now is None else now)
