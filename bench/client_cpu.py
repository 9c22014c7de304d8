"""Client CPU of one ``Limiter.decide`` with the Redis call replaced by a canned reply.

Takes the root of a source tree, so that two versions of the client can be
compared process by process, alternated (``docs/benchmarks.md``)::

    git archive <commit> limits | tar -x -C /tmp/base
    for i in 1 2 3 4 5 6; do
        .venv/bin/python bench/client_cpu.py /tmp/base; .venv/bin/python bench/client_cpu.py .
    done

Prints the best of 5 blocks of 20,000 decisions (random tenants and IPs, the
policy of ``bench/decisions.py``), in µs. Only names both versions have are used.
"""

import random
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

from sluice import (
    Dimension,
    Limit,
    Limiter,
    Policy,
    Route,
    Rules,
    Snapshot,
)
from sluice.bundle import fallback_snapshot

TENANTS, OPS = 10_000, 20_000


def rules() -> Snapshot:
    big = 10_000_000
    limits = (Limit(Dimension.TENANT, big, 1, big), Limit(Dimension.IP, big, 1, big))
    base = fallback_snapshot()
    return Snapshot.build(
        version=1,
        parent=None,
        published_at=base.published_at,
        effective_at=base.published_at,
        rules=Rules(
            tiers={"pro": "Pro"},
            tenants={f"t{i}": "pro" for i in range(TENANTS)},
            routes={"search": Route("search", ("GET",), "/v1/search")},
            policies=(
                Policy("default", "*", limits),
                Policy("tier:pro", "search", limits),
            ),
        ),
    )


def main() -> None:
    limiter = Limiter("redis://127.0.0.1:1", rules())
    reply = [1, 1, 1_000, 1, 1_000]
    limiter.bucket = lambda keys, args: (
        reply
    )  # the round trip removed: what the client adds
    limiter.time_told(None)  # no Redis to ask its time: the wall clock serves
    rng = random.Random(7)
    requests = [
        (f"t{rng.randrange(TENANTS)}", f"10.{rng.randrange(40)}.0.1")
        for _ in range(OPS)
    ]
    for tenant, ip in requests:  # warm the caches, as a running gateway has them
        limiter.decide(route="search", tenant=tenant, ip=ip)
    blocks = []
    for _ in range(5):
        began = time.perf_counter()
        for tenant, ip in requests:
            limiter.decide(route="search", tenant=tenant, ip=ip)
        blocks.append((time.perf_counter() - began) / OPS * 1e6)
    print(f"{min(blocks):.2f}")


if __name__ == "__main__":
    main()
