"""SnapshotSource: the gateway's copy of the rules, polled from the control plane.

Speaks ``docs/gateway-protocol.md``: ``GET <url>`` with the gateway token,
``If-None-Match``, gzip, and the ``Sluice-Gateway-*`` / ``Sluice-*-Version``
headers. Promises:

- a request never waits for the control plane: polling runs in a background
  thread, and :meth:`SnapshotSource.current` only reads memory;
- a new bundle is verified (its Ed25519 signature by one of ``public_keys``,
  then shape, rules, hashes) before it replaces the old one; a bad one, an
  unsigned one or one signed by an unknown key is kept out with one log line
  and reported on the next poll (:mod:`.signing`);
- the last good bundle is written to ``cache_path`` atomically with its
  signature, and read back at start-up, so a gateway restarted during a
  control-plane outage enforces what it enforced before; the signature is
  checked again on that read, and a corrupt, edited or unsigned file is
  ignored with one log line;
- with nothing at all, :func:`.bundle.fallback_snapshot` applies: strict, never
  unlimited;
- scheduled snapshots take over at their effective time, even while the
  control plane is unreachable, and expired overrides stop applying, both
  judged by the time the limiter gives (Redis's clock, shared by every
  gateway: :meth:`.limiter.LimiterCore.rules_time`); ``wall`` only when asked
  without one.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from . import protocol
from .bundle import (
    Bundle,
    SignedBundle,
    fallback_snapshot,
    read_bundle_file,
    verify_bundle_bytes,
    write_bundle_file,
)
from .errors import SnapshotError
from .signing import KeyRing
from .snapshot import Snapshot

__all__ = ["PollResult", "SnapshotSource"]

logger = logging.getLogger("sluice.source")

_UNPRINTABLE = re.compile(r"[^\x20-\x7e]+")


class PollResult(StrEnum):
    APPLIED = "applied"  #: a new bundle was verified and is now in force
    NOT_MODIFIED = "not_modified"  #: 304: the gateway is up to date
    REJECTED = "rejected"  #: a bundle came but failed verification; the old one stays
    FAILED = "failed"  #: no answer, or an error status


class SnapshotSource:
    """Polls ``url`` every ``interval`` seconds (± ``jitter``, a fraction), backing off on errors.

    ``url`` is the full snapshot endpoint, e.g. ``http://cp:8000/api/v1/snapshot``;
    ``public_keys`` the keys a bundle must be signed with (the control plane's
    ``/.well-known/sluice-keys.json``, given in configuration, never fetched).
    Call :meth:`start` to poll in a daemon thread, or :meth:`poll_once` directly.
    While the control plane fails, polls back off to at most ``max_backoff``
    (default: twice the interval), drawn at random up to it so a fleet does not
    come back at once: a gateway picks up new rules within ``max_backoff``
    (plus one poll) after the control plane returns.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        gateway_id: str,
        public_keys: KeyRing,
        cache_path: str | Path | None = None,
        interval: float = 5.0,
        jitter: float = 0.2,
        timeout: float = 2.0,
        max_backoff: float | None = None,
        wall: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.url, self.gateway_id = url, gateway_id
        self.cache_path = Path(cache_path) if cache_path else None
        self.interval, self.jitter, self.timeout = interval, jitter, timeout
        self.max_backoff = 2 * interval if max_backoff is None else max_backoff
        self._token, self._wall, self._rng = token, wall, rng
        self.public_keys = public_keys
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0  #: polls failed in a row
        self.etag: str | None = None  #: of the bundle in force, sent as If-None-Match
        #: the bundle in force, signed, while ``cache_path`` does not hold it
        #: (a write failed): written again after every poll until it succeeds
        self.unsaved: SignedBundle | None = None
        self._rejected: tuple[int, str] | None = None  #: reported on the next poll
        #: the ETag of the last bundle refused: logged once, not at every poll
        self._refused_etag: str | None = None
        self._write_failed = False  #: the last write of cache_path failed
        #: in force, from when, until when (the next switch), bundle
        self._state: tuple[Snapshot, float, float, Bundle]
        bundle = self._read_cache() or Bundle(fallback_snapshot())
        self._install(bundle)

    # -- what requests read -------------------------------------------------

    @property
    def bundle(self) -> Bundle:
        return self._state[3]

    def current(self, now: float | None = None) -> Snapshot:
        """The snapshot in force at ``now`` (default: ``wall``): one comparison
        unless a scheduled switch is due."""
        state = self._state
        if now is None:
            now = self._wall()
        if state[1] <= now < state[2]:
            return state[0]
        fresh = _state_at(state[3], now)
        with self._lock:
            if self._state is state:  # a poll may have installed a new bundle meanwhile
                self._state = fresh
        return fresh[0]

    def upcoming(self, now: float | None = None) -> Snapshot | None:
        """The next scheduled snapshot, which limiters rehearse (:mod:`.rehearsal`)."""
        return self.bundle.upcoming(self._wall() if now is None else now)

    def _install(self, bundle: Bundle) -> None:
        state = _state_at(bundle, self._wall())
        with self._lock:
            self._state = state

    # -- polling ------------------------------------------------------------

    def start(self) -> SnapshotSource:
        """Poll in a daemon thread: now, then every interval. Returns self."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name=f"sluice-snapshot-{self.gateway_id}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the polling thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except (
                Exception
            ):  # the poller must outlive any bug: the gateway keeps its rules
                self.failures += 1
                logger.exception("snapshot.poll_crashed")
            self._stop.wait(self.next_delay())

    def next_delay(self) -> float:
        """Seconds to the next poll: the interval ± jitter; after failures, drawn
        between the interval and the backoff (doubled per failure, capped at
        ``max_backoff``), so that gateways that failed together spread out."""
        if not self.failures:
            return self.interval * (1 + self.jitter * (2 * self._rng() - 1))
        ceiling = min(self.max_backoff, self.interval * 2.0 ** min(self.failures, 30))
        low = min(self.interval, ceiling)
        return low + (ceiling - low) * self._rng()

    def poll_once(self) -> PollResult:
        """Ask the control plane once; apply, keep, or reject what comes back.

        Then, if the last good bundle is not on disk yet (a write failed, e.g.
        the disk was full), try writing it again.
        """
        try:
            return self._poll()
        finally:
            if self.unsaved is not None:
                self._write_cache(self.unsaved)

    def _poll(self) -> PollResult:
        request = urllib.request.Request(self.url, headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = _decoded(
                    response.read(), response.headers.get("Content-Encoding")
                )
                etag = response.headers.get("ETag")
                signature = response.headers.get(protocol.SIGNATURE)
        except urllib.error.HTTPError as exc:
            exc.close()  # the connection: a sync worker lingers until its client closes
            if exc.code == 304:
                return self._succeeded(PollResult.NOT_MODIFIED)
            return self._failed(f"HTTP {exc.code} {exc.reason}")
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, bad gzip
            return self._failed(f"{type(exc).__name__}: {exc}")
        return self._received(body, etag, signature)

    def _headers(self) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
            protocol.GATEWAY_ID: self.gateway_id,
        }
        if self.etag:
            headers["If-None-Match"] = self.etag
        version = self.bundle.active.version
        if version > 0:  # 0 is the built-in fallback: nothing applied yet
            headers[protocol.APPLIED_VERSION] = str(version)
        upcoming = self.upcoming()
        if upcoming is not None:
            headers[protocol.REHEARSED_VERSION] = str(upcoming.version)
        if self._rejected is not None:
            rejected_version, reason = self._rejected
            headers[protocol.REJECTED_VERSION] = str(rejected_version)
            headers[protocol.REJECTED_REASON] = reason
            self._rejected = None
        return headers

    def _received(
        self, body: bytes, etag: str | None, signature: str | None
    ) -> PollResult:
        try:
            signed = verify_bundle_bytes(body, signature, self.public_keys, etag=etag)
        except SnapshotError as exc:
            version = _claimed_version(body)
            if etag is None or etag != self._refused_etag:  # one line per bundle
                logger.warning("snapshot.rejected: version %s: %s", version, exc)
            self._refused_etag = etag
            if version is not None:
                self._rejected = (version, _one_line(str(exc)))
            return self._succeeded(PollResult.REJECTED)
        self._install(signed.bundle)
        self.etag = etag
        self.unsaved = signed  # written after the poll (poll_once)
        logger.info("snapshot.applied: version %s", signed.bundle.active.version)
        return self._succeeded(PollResult.APPLIED)

    def _succeeded(self, result: PollResult) -> PollResult:
        if self.failures:
            logger.info("snapshot.reachable: after %d failed polls", self.failures)
        self.failures = 0
        return result

    def _failed(self, reason: str) -> PollResult:
        if not self.failures:  # one line per outage, not one per poll
            logger.warning("snapshot.unreachable: %s: %s", self.url, reason)
        self.failures += 1
        return PollResult.FAILED

    # -- the last good bundle on disk ------------------------------------------

    def _read_cache(self) -> Bundle | None:
        if self.cache_path is None or not self.cache_path.exists():
            return None
        try:
            signed = read_bundle_file(self.cache_path, self.public_keys)
        except (OSError, SnapshotError) as exc:
            logger.warning("snapshot.cache_ignored: %s: %s", self.cache_path, exc)
            return None
        self.etag = signed.etag
        logger.info("snapshot.cache_loaded: version %s", signed.bundle.active.version)
        return signed.bundle

    def _write_cache(self, signed: SignedBundle) -> None:
        if self.cache_path is None:
            self.unsaved = None
            return
        try:
            write_bundle_file(self.cache_path, signed)
        except OSError as exc:  # a full disk must not stop enforcement
            if not self._write_failed:  # one line until a write succeeds
                logger.warning(
                    "snapshot.cache_write_failed: %s: %s; tried again after every poll",
                    self.cache_path,
                    exc,
                )
            self.unsaved, self._write_failed = signed, True
            return
        if self._write_failed:
            logger.info(
                "snapshot.cache_written: %s after failed writes", self.cache_path
            )
        self.unsaved, self._write_failed = None, False


def _decoded(body: bytes, encoding: str | None) -> bytes:
    return gzip.decompress(body) if encoding == "gzip" else body


def _claimed_version(body: bytes) -> int | None:
    """The active version a rejected bundle claims, if it can be read at all."""
    try:
        data: Any = json.loads(body)
        version = data["active"]["version"]
    except (ValueError, TypeError, KeyError):
        return None
    return (
        version if isinstance(version, int) and not isinstance(version, bool) else None
    )


def _one_line(text: str, limit: int = 200) -> str:
    return _UNPRINTABLE.sub(" ", text).strip()[:limit]


def _state_at(bundle: Bundle, now: float) -> tuple[Snapshot, float, float, Bundle]:
    """What :meth:`SnapshotSource.current` keeps: the snapshot in force at ``now``
    and the times between which it stays so (a limiter's clock may be behind the
    one it was worked out by)."""
    return (
        bundle.in_force(now),
        bundle.in_force_since(now),
        bundle.next_switch(now),
        bundle,
    )
