"""The gateway bundle: the active snapshot and the scheduled ones, prepared in Redis.

Gateways poll ``GET /api/v1/snapshot`` every few seconds; the answer is the
bundle of ``docs/gateway-protocol.md``::

    {"active": <snapshot document>, "scheduled": [<snapshot document>, ...]}

It is assembled from the bytes stored at publish (never re-serialized), gzipped
once, and written to one Redis hash, ``keys.BUNDLE_KEY``:

=================== ==========================================================
``etag``            quoted SHA-256 of ``body``: what ``If-None-Match`` is compared to
``body``            the bundle bytes
``body_gzip``       the same, gzip-compressed
``signature``       the Ed25519 signature of ``body`` (``Sluice-Signature``)
``active``          the active version number
``scheduled``       the scheduled version numbers, comma-separated, in order
``gen_version``     the highest version published when it was built
``gen_activations`` how many versions had been activated when it was built
=================== ==========================================================

A 304 reads ``etag`` only: no database query. The bundle is rewritten on the
commit of every publish, rollback and activation. Two rewrites may race, so the
write is a compare-and-set on (``gen_version``, ``gen_activations``), which only
grow: an older state never replaces a newer one. If Redis lost the hash, or a
rewrite failed, :func:`snapshot_bundle_get` and the beat task rebuild it from
Postgres. After restoring Postgres from a backup (the generation goes back),
rebuild with ``snapshot_bundle_refresh(force=True)``. While Redis does not
answer, polls are served the bundle built from Postgres
(:func:`snapshot_bundle_from_postgres`, one query when nothing changed).
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Collection
from dataclasses import dataclass

import redis
from django.db.models import Count, Max

from limits.core.signing import bundle_sign, signing_key
from limits.core.store import redis_client
from limits.gateways.keys import BUNDLE_KEY
from limits.gateways.window import poll_window_reset
from limits.models import Snapshot
from limits.versions.selectors import snapshot_get_active, snapshot_scheduled
from sluice.signing import key_id

__all__ = [
    "ANY_ETAG",
    "Bundle",
    "etag_held",
    "snapshot_bundle_build",
    "snapshot_bundle_etag",
    "snapshot_bundle_from_postgres",
    "snapshot_bundle_get",
    "snapshot_bundle_refresh",
    "snapshot_bundle_sync",
]

#: ``If-None-Match: *``: any bundle at all matches.
ANY_ETAG = "*"


def etag_held(held: Collection[str], etag: str) -> bool:
    """Whether a gateway holding ``held`` (``If-None-Match``'s tags, weak prefixes
    removed) has the bundle of ``etag``: the weak comparison of RFC 9110, 13.1.2."""
    return etag in held or ANY_ETAG in held


# KEYS[1] the hash; ARGV: force ("1"/"0"), version, activations, then field/value pairs.
_WRITE_IF_NEWER = """
local stored = redis.call('HMGET', KEYS[1], 'gen_version', 'gen_activations')
if ARGV[1] ~= '1' and stored[1] then
    local version, activations = tonumber(stored[1]), tonumber(stored[2])
    local new_version, new_activations = tonumber(ARGV[2]), tonumber(ARGV[3])
    if new_version < version or (new_version == version and new_activations < activations) then
        return 0
    end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
return 1
"""


@dataclass(frozen=True)
class Bundle:
    """What a gateway poll is answered with."""

    etag: str  #: quoted strong entity tag
    body: bytes
    body_gzip: bytes
    signature: str  #: ``<key id>:<base64>`` over ``body`` (``sluice.signing``)
    active: int  #: the active version
    scheduled: tuple[int, ...]  #: versions that take effect later, in order
    generation: tuple[int, int]  #: (highest version, activations) it was built from

    def fields(self) -> dict[str, bytes | str | int]:
        return {
            "etag": self.etag,
            "body": self.body,
            "body_gzip": self.body_gzip,
            "signature": self.signature,
            "active": self.active,
            "scheduled": ",".join(map(str, self.scheduled)),
            "gen_version": self.generation[0],
            "gen_activations": self.generation[1],
        }

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes]) -> Bundle:
        scheduled = raw[b"scheduled"].decode()
        return cls(
            etag=raw[b"etag"].decode(),
            body=raw[b"body"],
            body_gzip=raw[b"body_gzip"],
            signature=raw[b"signature"].decode(),
            active=int(raw[b"active"]),
            scheduled=tuple(int(v) for v in scheduled.split(",") if v),
            generation=(int(raw[b"gen_version"]), int(raw[b"gen_activations"])),
        )


def snapshot_bundle_build(
    *, generation: tuple[int, int] | None = None
) -> Bundle | None:
    """The bundle of the current state in Postgres; None before the first publish.

    ``generation``: the state's (highest version, activations), if already read.
    """
    generation = generation or _generation()
    active = snapshot_get_active()
    if active is None:
        return None
    scheduled = list(
        snapshot_scheduled()
        .filter(version__gt=active.version)
        .defer("content_gzip", "diff")  # only their content goes in
    )
    body = b"".join(
        [
            b'{"active":',
            bytes(active.content),
            b',"scheduled":[',
            b",".join(bytes(row.content) for row in scheduled),
            b"]}",
        ]
    )  # canonical already: keys in order, documents canonical
    return Bundle(
        etag=f'"{hashlib.sha256(body).hexdigest()}"',
        body=body,
        body_gzip=gzip.compress(body, mtime=0),
        signature=bundle_sign(body),  # the bytes are final: nothing re-serializes them
        active=active.version,
        scheduled=tuple(row.version for row in scheduled),
        generation=generation,
    )


def snapshot_bundle_refresh(*, force: bool = False) -> Bundle | None:
    """Rebuild the bundle from Postgres and store it unless Redis holds a newer one."""
    bundle = snapshot_bundle_build()
    if bundle is None:
        return None
    args: list = ["1" if force else "0", *bundle.generation]
    for name, value in bundle.fields().items():
        args += [name, value]
    poll_window_reset()  # this process's gateways see the new ETag at once
    _client().eval(_WRITE_IF_NEWER, 1, BUNDLE_KEY, *args)
    return bundle


def snapshot_bundle_etag() -> str | None:
    """The stored bundle's ETag, from Redis alone (the 304 path); None if absent."""
    etag = _client().hget(BUNDLE_KEY, "etag")
    return etag.decode() if etag is not None else None


def snapshot_bundle_get(*, timeout: float | None = None) -> Bundle | None:
    """The stored bundle, rebuilt from Postgres if Redis lost it; built from
    Postgres alone when Redis does not answer (within ``timeout``, when given:
    the poll path's, so a paused Redis cannot hold a gateway's poll)."""
    try:
        raw = redis_client(timeout=timeout).hgetall(BUNDLE_KEY)
    except redis.RedisError:
        return snapshot_bundle_from_postgres()
    if raw and raw.get(b"signature", b"").startswith(_signer()):
        return Bundle.from_fields(raw)  # else unsigned, or by a key since rotated
    return snapshot_bundle_refresh()


#: The last bundle built by :func:`snapshot_bundle_from_postgres`, by generation.
_BUILT: dict[tuple[int, int], Bundle] = {}


def snapshot_bundle_from_postgres() -> Bundle | None:
    """The bundle of the current state in Postgres, without Redis: built once per
    generation in this process (one aggregate query when nothing changed)."""
    generation = _generation()
    bundle = _BUILT.get(generation)
    if bundle is None:
        bundle = snapshot_bundle_build(generation=generation)
        if bundle is not None:
            _BUILT.clear()
            _BUILT[generation] = bundle
    return bundle


def snapshot_bundle_sync() -> bool:
    """Rewrite the bundle if it lags behind Postgres (a failed write); True if it did."""
    stored = _client().hmget(BUNDLE_KEY, "gen_version", "gen_activations")
    current = _generation()
    if current[0] == 0:
        return False
    if stored[0] is not None and (int(stored[0]), int(stored[1])) == current:
        return False
    snapshot_bundle_refresh()
    return True


def _generation() -> tuple[int, int]:
    state = Snapshot.objects.aggregate(top=Max("version"), active=Count("activated_at"))
    return state["top"] or 0, state["active"]


def _signer() -> bytes:
    """The prefix of a signature by the current key: ``<key id>:``."""
    return key_id(signing_key()).encode() + b":"


def _client() -> redis.Redis:
    return redis_client()
