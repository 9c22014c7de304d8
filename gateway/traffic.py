"""A traffic generator for the demo gateway: several tenants and routes, skewed so some get limited.

Run ``make traffic`` (or ``python manage.py generate_traffic``, which takes the
tenants from the rules, or ``python -m gateway.traffic``). It sends ``rate``
requests per second for ``seconds`` seconds from a few threads, tenants
weighted 1, 1/2, 1/3... so the first ones hit their limits, over the demo
routes (search most, exports least), and prints what came back per tenant.
It only talks to a loopback address unless told otherwise: a load generator
must not be pointed at someone else's server by accident.
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_TENANTS",
    "ROUTES",
    "Plan",
    "Report",
    "add_options",
    "check_loopback",
    "generate",
    "main",
]

DEFAULT_TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
#: (method, path, weight): the demo gateway's backends (gateway/demo.py)
ROUTES = (
    ("GET", "/v1/search?q=widgets", 50),
    ("GET", "/v1/orders", 20),
    ("GET", "/v1/orders/42", 15),
    ("POST", "/v1/orders", 10),
    ("POST", "/v1/reports/7/export", 5),
)
ANONYMOUS_SHARE = 0.05  #: requests sent without a tenant


@dataclass(frozen=True)
class Plan:
    """What to send: where, how fast, for how long, as whom."""

    gateway: str = "http://127.0.0.1:8080"
    rate: float = 40.0  #: requests per second, all threads together
    seconds: float = 60.0
    workers: int = 8
    tenants: Sequence[str] = DEFAULT_TENANTS
    seed: int = 7
    timeout: float = 5.0


@dataclass
class Report:
    """Status codes per tenant ("" for anonymous requests); 0 for a request that failed."""

    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, tenant: str, status: int) -> None:
        with self.lock:
            self.statuses.setdefault(tenant, Counter())[status] += 1

    @property
    def sent(self) -> int:
        return sum(sum(c.values()) for c in self.statuses.values())

    def lines(self) -> list[str]:
        rows = [
            f"{'tenant':12} {'sent':>6} {'2xx':>6} {'429':>6} {'503':>6} {'other':>6}"
        ]
        for tenant, codes in sorted(self.statuses.items()):
            ok = sum(n for code, n in codes.items() if 200 <= code < 300)
            other = sum(codes.values()) - ok - codes[429] - codes[503]
            rows.append(
                f"{tenant or '(anonymous)':12} {sum(codes.values()):6} {ok:6} "
                f"{codes[429]:6} {codes[503]:6} {other:6}"
            )
        return rows


def check_loopback(url: str) -> None:
    """Raise ValueError unless ``url`` points at this machine."""
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{host!r} is not a loopback address (use --allow-remote)")


def _request(plan: Plan, rng: random.Random) -> tuple[str, urllib.request.Request]:
    weights = [1 / (rank + 1) for rank in range(len(plan.tenants))]
    tenant = (
        "" if rng.random() < ANONYMOUS_SHARE else rng.choices(plan.tenants, weights)[0]
    )
    method, path, _ = rng.choices(ROUTES, [w for _, _, w in ROUTES])[0]
    headers = {"X-User": f"user-{rng.randrange(5)}"}
    if tenant:
        headers |= {"X-Tenant": tenant, "X-Api-Key": f"key-{tenant}"}
    request = urllib.request.Request(
        plan.gateway.rstrip("/") + path,
        data=b"{}" if method == "POST" else None,
        headers=headers,
        method=method,
    )
    return tenant, request


def _send(request: urllib.request.Request, timeout: float) -> int:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code
    except OSError:
        return 0


def generate(plan: Plan) -> Report:
    """Send the plan's traffic and return what came back; stops by itself."""
    report, total = Report(), int(plan.rate * plan.seconds)
    counter, lock, began = iter(range(total)), threading.Lock(), time.monotonic()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            time.sleep(max(0.0, began + index / plan.rate - time.monotonic()))
            tenant, request = _request(plan, rng)
            report.add(tenant, _send(request, plan.timeout))

    threads = [
        threading.Thread(target=work, args=(plan.seed + n,), daemon=True)
        for n in range(plan.workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return report


def add_options(options: argparse.ArgumentParser, *, tenants: str) -> None:
    """The generator's options (shared with ``manage.py generate_traffic``)."""
    options.add_argument("--gateway", default=Plan.gateway, help="the gateway's URL")
    options.add_argument("--rate", type=float, default=Plan.rate, help="requests/s")
    options.add_argument("--seconds", type=float, default=Plan.seconds)
    options.add_argument("--workers", type=int, default=Plan.workers)
    options.add_argument("--tenants", default=tenants, help="comma-separated slugs")
    options.add_argument("--seed", type=int, default=Plan.seed)
    options.add_argument("--allow-remote", action="store_true")


def main(argv: Sequence[str] | None = None) -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(options, tenants=",".join(DEFAULT_TENANTS))
    args = options.parse_args(argv)
    if not args.allow_remote:
        check_loopback(args.gateway)
    plan = Plan(
        gateway=args.gateway,
        rate=args.rate,
        seconds=args.seconds,
        workers=args.workers,
        tenants=[t for t in args.tenants.split(",") if t],
        seed=args.seed,
    )
    print(f"{plan.rate:g} requests/s for {plan.seconds:g} s to {plan.gateway}")
    print("\n".join(generate(plan).lines()))


if __name__ == "__main__":
    main()
