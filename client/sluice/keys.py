"""The Redis key scheme of Sluice's token buckets: one scheme, defined here only.

A bucket key names *whose* bucket it is and over which window, never which
scope's policy set its numbers::

    rl:{<owner>}:route:<route>:<dimension>:<value>:<period>s
    rl:{tenant:acme}:route:search:user:42:60s
    rl:{tenant:acme}:route:*:tenant:acme:3600s
    rl:{ip:203.0.113.9}:route:*:ip:203.0.113.9:1s

- ``{<owner>}`` is the Redis Cluster hash tag. Every key of one decision carries
  the same owner, so the one Lua call that decides touches one slot:

  - ``tenant:<slug>`` when the request names a tenant;
  - ``tenant:~`` for traffic without a tenant when the policy counts per tenant:
    all anonymous traffic then shares one tenant bucket (one slot; issue 6's
    shards are the answer if it runs hot);
  - ``ip:<client ip>`` for other traffic without a tenant (``ip:~`` with no IP).

  A consequence of one slot per decision: a per-IP, per-user or per-API-key
  limit inside a tenant's decision counts within that tenant (the same IP
  calling as two tenants fills two buckets).
- ``<route>`` is the *policy's* route: a route slug, or ``*`` for a policy over
  all routes, so an all-routes limit is one bucket shared by every route.
- ``<dimension>:<value>`` is the subject the limit counts per. A missing value
  (no user id for a per-user limit) is ``~``: such requests share one bucket
  per owner and route, so a missing identity never skips a limit.
- ``<period>s`` is the limit's window in seconds: two limits of one dimension
  (per second and per day) are two buckets.

Hot keys and concurrency caps add two key forms under the same owner (so one
decision still touches one slot)::

    rl:{tenant:acme}:route:search:tenant:acme:1s:s3      shard 3 of a sharded bucket
    rl:{tenant:acme}:route:export:tenant:acme:inflight   a sorted set of requests in flight

A shard key is an ordinary bucket key with ``:s<index>`` appended; an
``inflight`` key holds one member per request in flight, scored by the Redis
time (ms) at which it expires if never released.

While a version is scheduled, its rehearsal (:mod:`.rehearsal`) adds one more
form, still under the request's owner::

    rl:{tenant:acme}:route:search:tenant:acme:1s:r7      version 7's rehearsal of a bucket

the key version 7's policy would use, with ``:r<version>`` appended (a shard's
``:s<index>`` after it); it expires like any bucket.

Moving a tenant to another tier, or granting an override, changes the numbers
but not the key, so the tenant keeps its bucket and its history. Values are
written verbatim when short and plain (``[A-Za-z0-9._@:-]``, at most 64
characters); anything else, and every API key (a secret that must not appear
in Redis), is written as ``#`` and 32 hex digits of its SHA-256.
"""

from __future__ import annotations

import functools
import hashlib
import re

from .quota import Dimension

__all__ = [
    "KEY_PREFIX",
    "MISSING",
    "encode_value",
    "inflight_template",
    "key_template",
    "owner_tag",
    "subject_value",
]

KEY_PREFIX = "rl"
MISSING = "~"  #: the value of an identity the request did not carry

_PLAIN = re.compile(r"[A-Za-z0-9._@:-]{1,64}")


#: Values remembered by the encoders below: a decision encodes two to four
#: values (owner, subjects), and the same tenants, users, keys and addresses
#: come back request after request. About 2 MB when full.
_ENCODED = 16_384


@functools.lru_cache(maxsize=_ENCODED)
def encode_value(value: str | None) -> str:
    """Return ``value`` as it appears in a key: verbatim, ``~`` when missing, else hashed."""
    if not value:
        return MISSING
    if _PLAIN.fullmatch(value):
        return value
    return _digest(value)


@functools.lru_cache(maxsize=_ENCODED)
def _digest(value: str) -> str:
    return "#" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def subject_value(
    dimension: Dimension,
    tenant: str | None,
    user: str | None,
    api_key: str | None,
    ip: str | None,
) -> str:
    """Return the encoded subject of a limit of ``dimension`` for one request."""
    if dimension is Dimension.TENANT:
        return encode_value(tenant)
    if dimension is Dimension.USER:
        return encode_value(user)
    if dimension is Dimension.API_KEY:
        return _digest(api_key) if api_key else MISSING
    return encode_value(ip)


def owner_tag(tenant: str | None, ip: str | None, counts_tenant: bool) -> str:
    """Return the hash-tag owner of a decision (see the module docstring)."""
    if tenant:
        return "tenant:" + encode_value(tenant)
    if counts_tenant:
        return "tenant:" + MISSING
    return "ip:" + encode_value(ip)


def key_template(
    route: str, dimension: Dimension, period: int | str, kind: str = "gcra"
) -> str:
    """Return the ``%``-template of a bucket key; fill it with ``(owner, value)``.

    A limit of another kind than ``gcra`` ends with ``:<kind>`` (a sliding window's
    key is a hash, a GCRA bucket's a string): two kinds over the same period
    never share a key, and GCRA keys keep their names. ``period`` is seconds, or a
    calendar quota's period (``day``, ``month``, ``month-billing``) written as is.

    Templates are built once per policy when a snapshot is loaded, so a request
    only pays for one string formatting per limit.
    """
    route_part = route.replace("%", "%%")
    suffix = "" if kind == "gcra" else f":{kind}"
    period_part = f"{period}s" if isinstance(period, int) else period
    return f"{KEY_PREFIX}:{{%s}}:route:{route_part}:{dimension.value}:%s:{period_part}{suffix}"


def inflight_template(route: str, dimension: Dimension) -> str:
    """Return the ``%``-template of a concurrency key; fill it with ``(owner, value)``."""
    route_part = route.replace("%", "%%")
    return f"{KEY_PREFIX}:{{%s}}:route:{route_part}:{dimension.value}:%s:inflight"
