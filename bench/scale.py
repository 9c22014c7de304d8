"""Scale of rules: publish, snapshot size, gateway load and resolution with 100k tenants.

Runs in a Django process on the bench database (``bench/run.py`` sets it up;
alone: ``DJANGO_SETTINGS_MODULE=bench.settings DATABASE_URL=..._bench REDIS_URL=<a
private redis> python -m bench.scale``). Loads the rules with ``bulk_create``
(``bench/rules_data.py``), then measures each stage of a first publish and of
a small edit published on top, the gateway's load of the bundle, resolution
per decision against a tiny rule set in the same run, and the control-plane
reads an operator does (explain, diff, admin pages). Prints Markdown.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import time
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.common import machine_line, spread, table  # noqa: E402
from bench.resolution import resolution_rows  # noqa: E402
from bench.rules_data import RuleSet, load_rules  # noqa: E402
from limits.choices import ScopeKind  # noqa: E402
from limits.core.audit import Actor  # noqa: E402
from limits.diff.diffing import rules_diff  # noqa: E402
from limits.gateways.bundle import snapshot_bundle_get  # noqa: E402
from limits.models import Limit, Policy, Tenant, Tier  # noqa: E402
from limits.publishing.services import snapshot_publish  # noqa: E402
from limits.rules.compiling import rules_compile  # noqa: E402
from limits.versions.explain import explain  # noqa: E402
from limits.versions.selectors import (  # noqa: E402
    snapshot_diff,
    snapshot_rules,
)
from sluice import Snapshot, validate_rules  # noqa: E402
from sluice.bundle import parse_bundle_bytes  # noqa: E402
from sluice.engine import Engine  # noqa: E402


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    """(result, seconds) of one call."""
    began = time.perf_counter()
    result = call()
    return result, time.perf_counter() - began


def peak_mib(call: Callable[[], Any]) -> float:
    """Peak Python memory a call allocates, in MiB (tracemalloc; slows the call)."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def publish_stages(parent: Any) -> list[tuple[str, float]]:
    """Seconds per stage of a publish, done by hand in the order the service does it."""
    stages = []
    compiled, seconds = timed(rules_compile)
    stages.append(("compile the working copy (queries + value types)", seconds))
    stages.append(("validate_rules", timed(lambda: validate_rules(compiled))[1]))
    now = timezone.now()
    document, seconds = timed(
        lambda: Snapshot.build(
            version=99, parent=None, published_at=now, effective_at=now, rules=compiled
        )
    )
    stages.append(("Snapshot.build (canonical bytes + SHA-256)", seconds))
    content, seconds = timed(document.to_bytes)
    stages.append(("to_bytes (canonical bytes again, stored)", seconds))
    stages.append(("rules digest", timed(compiled.digest)[1]))
    stages.append(("gzip", timed(lambda: gzip.compress(content, mtime=0))[1]))
    stages.append(
        ("diff against the parent", timed(lambda: rules_diff(parent, compiled))[1])
    )
    return stages


def small_edit() -> str:
    """What a busy day brings: one tier limit lowered, 10 tenants added, 50 overrides renewed."""
    pro = Tier.objects.get(slug="pro")
    Limit.objects.filter(policy__scope=ScopeKind.TIER, policy__tier=pro).filter(
        policy__route__slug="r001.read"
    ).update(rate=5)
    Tenant.objects.bulk_create(
        Tenant(slug=f"new{index}", name=f"New {index}", tier=pro) for index in range(10)
    )
    renewed = Policy.objects.filter(expires_at__isnull=False).order_by("pk")[:50]
    Policy.objects.filter(pk__in=list(renewed.values_list("pk", flat=True))).update(
        expires_at=timezone.now() + timedelta(days=30)
    )
    return "pro r001.read rate lowered, 10 tenants added, 50 overrides renewed"


def admin_pages(tenant: str) -> list[tuple[str, float, int]]:
    """Seconds to render the pages an operator opens, logged in as a superuser."""
    users = get_user_model().objects
    user = users.filter(username="bench-admin").first() or users.create_superuser(
        "bench-admin", "b@x.example", "x"
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    pk = Tenant.objects.get(slug=tenant).pk
    policy_pk = Policy.objects.filter(tenant__slug=tenant).values_list("pk", flat=True)[
        0
    ]
    pages = [
        ("tenants list", "/admin/limits/tenant/"),
        ("tenants search", f"/admin/limits/tenant/?q={tenant}"),
        ("tenant page (effective limits)", f"/admin/limits/tenant/{pk}/change/"),
        ("policies list", "/admin/limits/policy/"),
        ("policy page", f"/admin/limits/policy/{policy_pk}/change/"),
        ("versions list", "/admin/limits/snapshot/"),
        ("version page (diff)", "/admin/limits/snapshot/2/change/"),
    ]
    rows = []
    for name, url in pages:
        response, seconds = timed(lambda url=url: client.get(url))
        rows.append((name, seconds, response.status_code))
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def section_publish() -> Any:
    """A first publish, the stages of a publish, and a small edit published on top."""
    actor = Actor.system()
    first, first_s = timed(lambda: snapshot_publish(actor=actor, message="bench: 1"))
    parent = snapshot_rules(first)
    stages = publish_stages(parent)
    edit = small_edit()
    second, second_s = timed(  # the edit lowers a limit: at once, as an emergency
        lambda: snapshot_publish(
            actor=actor, message="bench: 2", emergency_reason="bench: a publish timed"
        )
    )
    rows = [(name, ms(s)) for name, s in stages]
    rows.append(("**snapshot_publish, first version** (whole service)", ms(first_s)))
    rows.append((f"**snapshot_publish, small edit** ({edit})", ms(second_s)))
    print("### Publish\n")
    print(table(["stage (the edit on top of version 1)", "ms"], rows))
    memory = peak_mib(lambda: publish_stages(parent))
    print(f"\nPeak Python memory of those stages (tracemalloc): {memory:,.0f} MiB")
    print(
        f"Stored diff: first version {len(str(first.diff)):,} characters; "
        f"the edit {len(str(second.diff)):,}, counts {second.diff['counts']}\n"
    )
    return second


def section_size(second: Any) -> Any:
    bundle = snapshot_bundle_get()
    rows = [
        (
            "version document",
            f"{len(bytes(second.content)):,} B",
            f"{len(bytes(second.content_gzip)):,} B",
        ),
        ("gateway bundle", f"{len(bundle.body):,} B", f"{len(bundle.body_gzip):,} B"),
    ]
    print("### Snapshot size\n")
    print(table(["", "plain", "gzip"], rows))
    return bundle


def section_gateway(bundle: Any, repeats: int) -> Snapshot:
    """Parse + verify the bundle, then build the engine, as a gateway does on a new version."""
    loads = []
    for _ in range(repeats):
        parsed, parse_s = timed(lambda: parse_bundle_bytes(bundle.body))
        _, engine_s = timed(lambda parsed=parsed: Engine(parsed.active))
        loads.append((parse_s * 1000, engine_s * 1000))
    memory = peak_mib(lambda: Engine(parse_bundle_bytes(bundle.body).active))
    print("\n### Gateway: load and index the bundle\n")
    print(
        table(
            ["step", "ms, median [min .. max]"],
            [
                (
                    "parse + verify (JSON, hash, shape, validate_rules)",
                    spread([p for p, _ in loads], 0),
                ),
                (
                    "Engine (Resolver index + route table)",
                    spread([e for _, e in loads], 0),
                ),
            ],
        )
    )
    print(f"\nPeak Python memory while loading (tracemalloc): {memory:,.0f} MiB\n")
    return parsed.active


def section_resolution(big: Snapshot, ops: int, repeats: int) -> None:
    print("### Resolution per decision: these rules vs a tiny rule set\n")
    print(
        f"The same {ops:,} requests (random tenant and route) per block, "
        f"{repeats} A/B repeats, µs per request (resolve + keys).\n"
    )
    print(
        table(
            ["", "big rules µs", "tiny rules µs", "big / tiny"],
            resolution_rows(big, ops, repeats),
        )
    )


def section_reads() -> None:
    """What operators do at this scale: explain, diffs, admin pages."""
    reads = [
        (
            "explain (active version), first call",
            lambda: explain(tenant="t000001", route="r001.read"),
        ),
        (
            "explain (active version), next call",
            lambda: explain(tenant="t000002", route="r002.read"),
        ),
        (
            "explain (working copy)",
            lambda: explain(tenant="t000003", route="r003.read", source="working"),
        ),
        ("snapshot_diff(1, 2)", lambda: snapshot_diff(old=1, new=2)),
        ("snapshot_diff(active, working copy)", snapshot_diff),
    ]
    rows = [(name, ms(timed(call)[1]), "") for name, call in reads]
    rows += [
        (f"admin: {name}", ms(s), status) for name, s, status in admin_pages("t000001")
    ]
    print("\n### Control-plane reads at this scale\n")
    print(table(["read", "ms", "HTTP"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=100_000)
    parser.add_argument("--overrides", type=int, default=20_000)
    parser.add_argument("--routes", type=int, default=200)
    parser.add_argument("--ops", type=int, default=20_000, help="resolutions per block")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    shape = RuleSet(options.tenants, options.overrides, options.routes)
    print(f"## Scale of rules\n\n{machine_line()}\n")
    counts, seconds = timed(lambda: load_rules(shape))
    print(f"Working copy (bulk_create, {seconds:.1f} s): {counts}\n")
    second = section_publish()
    bundle = section_size(second)
    big = section_gateway(bundle, options.repeats)
    section_resolution(big, options.ops, options.repeats)
    section_reads()


if __name__ == "__main__":
    main()
