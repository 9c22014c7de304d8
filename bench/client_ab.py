"""Client CPU of two versions of the client in one process, A B A B interleaved.

``bench/client_cpu.py`` compares two trees process by process, so a noisy
moment hits one process and not the other; this runs both in the same process
and alternates blocks (A B B A), as ``/work/shared/BENCHMARKING.md`` asks. The other
version is imported under the name ``sluice_base`` (its package files copied
to a temporary directory; the client's own imports are relative)::

    git archive <commit> client | tar -x -C /tmp/base
    PYTHONPATH=client .venv/bin/python bench/client_ab.py /tmp/base/client [pairs]

Prints, per measure, each version's best and median block and the ratio this /
base per pair: ``Limiter.decide`` with the Redis call replaced by a canned
reply (the policy of ``bench/client_cpu.py``), and ``engine.bucket_statuses``
(a reply of two limits read into statuses). Never asserts anything.
"""

import importlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TENANTS, OPS, READS = 10_000, 20_000, 100_000


def _limiter(pkg: str) -> Callable[[], None]:
    m = importlib.import_module(pkg)
    fallback = importlib.import_module(pkg + ".bundle").fallback_snapshot
    big = 10_000_000
    limits = (
        m.Limit(m.Dimension.TENANT, big, 1, big),
        m.Limit(m.Dimension.IP, big, 1, big),
    )
    rules = m.Rules(
        tiers={"pro": "Pro"},
        tenants={f"t{i}": "pro" for i in range(TENANTS)},
        routes={"search": m.Route("search", ("GET",), "/v1/search")},
        policies=(
            m.Policy("default", "*", limits),
            m.Policy("tier:pro", "search", limits),
        ),
    )
    at = fallback().published_at
    snapshot = m.Snapshot.build(
        version=1, parent=None, published_at=at, effective_at=at, rules=rules
    )
    limiter = m.Limiter("redis://127.0.0.1:1", snapshot)
    reply = [1, 1, 1_000, 1, 1_000]
    limiter.bucket = lambda keys, args: reply  # the round trip removed
    limiter.time_told(None)
    rng = random.Random(7)
    requests = [
        (f"t{rng.randrange(TENANTS)}", f"10.{rng.randrange(40)}.0.1")
        for _ in range(OPS)
    ]

    def block() -> None:
        for tenant, ip in requests:
            limiter.decide(route="search", tenant=tenant, ip=ip)

    block()  # warm the caches, as a running gateway has them
    return block


def _statuses(pkg: str) -> Callable[[], None]:
    m = importlib.import_module(pkg)
    engine = importlib.import_module(pkg + ".engine")
    limits = (
        m.Limit(m.Dimension.TENANT, 100, 1, 200),
        m.Limit(m.Dimension.IP, 10, 1, 20),
    )
    plan = engine.compile_policy(m.Policy("default", "*", limits), cost=1)
    keys, reply, read = ["a", "b"], [1, 1, 5_000, 1, 90_000, 0], engine.bucket_statuses

    def block() -> None:
        for _ in range(READS):
            read(plan, keys, reply)

    return block


def _compare(
    title: str, unit: float, blocks: dict[str, Callable[[], None]], pairs: int
) -> None:
    times: dict[str, list[float]] = {name: [] for name in blocks}
    order = list(blocks.items())
    for _ in range(pairs):
        order.reverse()  # A B B A ...: neither version always runs first
        for name, block in order:
            began = time.perf_counter()
            block()
            times[name].append((time.perf_counter() - began) / unit)
    ratios = [t / b for b, t in zip(times["base"], times["this"], strict=True)]
    said = ", ".join(
        f"{n} best {min(v):.3f} median {statistics.median(v):.3f}"
        for n, v in times.items()
    )
    print(
        f"{title}: {said}; this / base per pair: median {statistics.median(ratios):.3f} "
        f"[{min(ratios):.2f} .. {max(ratios):.2f}]"
    )


def main() -> None:
    base, pairs = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with tempfile.TemporaryDirectory() as where:
        shutil.copytree(base / "sluice", Path(where) / "sluice_base")
        sys.path.insert(0, where)
        import sluice

        print(f"this: {Path(sluice.__file__).parent}; base: {base / 'sluice'}")
        _compare(
            "Limiter.decide, µs",
            OPS / 1e6,
            {"base": _limiter("sluice_base"), "this": _limiter("sluice")},
            pairs,
        )
        _compare(
            "bucket_statuses, µs",
            READS / 1e6,
            {"base": _statuses("sluice_base"), "this": _statuses("sluice")},
            pairs,
        )


if __name__ == "__main__":
    main()
