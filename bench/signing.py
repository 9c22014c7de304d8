"""Signed bundles: what signing (once per bundle build) and verifying (every 200
and every cache read, on each gateway) cost, against the SHA-256 the ETag already
takes over the same bytes (the same-process baseline).

``python -m bench.signing [--sizes 1,6,24]`` (MiB: 6 MiB is the 100,000-tenant
bundle of ``docs/benchmarks.md``). Prints Markdown.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.common import machine_line, table
from sluice.signing import KeyRing, sign


def _median_ms(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def _row(key: Ed25519PrivateKey, ring: KeyRing, size: int, runs: int) -> list[str]:
    body = os.urandom(size * 1024 * 1024)
    signature = sign(key, body)
    baseline = _median_ms(lambda: hashlib.sha256(body).digest(), runs)
    signing = _median_ms(lambda: sign(key, body), runs)
    verifying = _median_ms(lambda: ring.verify(body, signature), runs)
    return [
        f"{size} MiB",
        f"{baseline:.1f}",
        f"{signing:.1f}",
        f"{verifying:.1f}",
        f"{verifying / baseline:.1f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,6,24", help="bundle sizes, MiB")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    key = Ed25519PrivateKey.generate()
    ring = KeyRing([key])
    rows = [_row(key, ring, int(size), args.runs) for size in args.sizes.split(",")]
    print(machine_line())
    print()
    header = [
        "bundle",
        "SHA-256 (ETag), ms",
        "sign, ms",
        "verify, ms",
        "verify / SHA-256",
    ]
    print(table(header, rows))


if __name__ == "__main__":
    main()
