"""PLACEHOLDER from branch ``publish``: the bucket keys a request would be charged.

The real module belongs to the enforcement client (another branch) and replaces
this one at merge; ``limits.explain`` only relies on :func:`bucket_keys` returning
one :class:`BucketKey` per limit of the winning policy, in the policy's order.

Key scheme (sketch): ``rl:{<hash tag>}:route:<route>:<dimension>:<subject>:<period>s``,
the hash tag being the tenant (or, for anonymous traffic, the IP) so that one
request's keys share a Redis Cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from .resolver import Resolution
from .snapshot import ALL_ROUTES, Dimension, Limit

__all__ = ["BucketKey", "bucket_keys"]


@dataclass(frozen=True, slots=True)
class BucketKey:
    """The bucket one limit of a request is charged to."""

    limit: Limit
    key: str | None  #: None when the request lacks the limit's subject (no user...)
    cost: int  #: tokens this request takes from the bucket


def bucket_keys(
    resolution: Resolution,
    *,
    tenant: str | None = None,
    user: str | None = None,
    api_key: str | None = None,
    ip: str | None = None,
) -> tuple[BucketKey, ...]:
    """One key per limit of ``resolution.policy``."""
    subjects = {
        Dimension.TENANT: tenant,
        Dimension.USER: user,
        Dimension.API_KEY: api_key,
        Dimension.IP: ip,
    }
    tag = f"tenant:{tenant}" if tenant else f"ip:{ip or '-'}"
    route = resolution.route.slug if resolution.route else ALL_ROUTES
    keys = []
    for limit in resolution.policy.limits:
        subject = subjects[limit.dimension]
        key = None
        if subject:
            key = f"rl:{{{tag}}}:route:{route}:{limit.dimension.value}:{subject}:{limit.period}s"
        keys.append(BucketKey(limit, key, limit.cost or resolution.cost))
    return tuple(keys)
