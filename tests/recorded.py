"""Recorded traffic for the impact estimate's tests: decision events through the real tally."""

from __future__ import annotations

import itertools
import json
from datetime import datetime

from limits.traffic.stats import stats_apply

_ids = itertools.count(1)


def record(
    tenant: str,
    route: str,
    start: datetime,
    per_second: list[int],
    *,
    outcome: str = "allowed",
    policy: str = "tier:pro/search",
) -> None:
    """Count ``per_second[i]`` decisions of ``tenant`` on ``route`` in second ``i`` after
    ``start``, as one stream entry of a gateway (``sluice.metrics``' format)."""
    base = int(start.timestamp()) * 1000
    events = [
        [base + i * 1000, tenant, route, policy, 1, outcome, "", n]
        for i, n in enumerate(per_second)
        if n
    ]
    fields = {b"v": b"1", b"gw": b"gw-test", b"events": json.dumps(events).encode()}
    stats_apply(entries=[(f"{base}-{next(_ids)}", fields)])
