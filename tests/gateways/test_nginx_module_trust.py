"""nginx with Sluice's Lua module and rules it must not trust: a bundle it
cannot compile, an altered or unsigned one, a signature by an unknown key, a
last-good file edited on disk are refused (and reported), the rules in force
stay; key rotation's overlap accepts both keys; versions are judged by Redis
time, not the gateway's clock an hour off.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sluice import Bundle, KeyRing, Snapshot
from sluice.signing import sign
from tests.celery_fixtures import wait_until
from tests.conformance import corpus
from tests.gateways import servers
from tests.gateways.conftest import (
    call,
    port_of,
    reported,
    wait_applied,
)
from tests.servers import free_port
from tests.signing import TEST_SIGNING_KEY, keys_file


def test_nginx_module__bad_bundle__refused_reported_and_the_rules_in_force_stay(
    start_nginx, rules_server
):
    # Given nginx that applied the corpus' rules
    port, _ = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When the control plane serves a bundle without the default policy
    broken = corpus.bundle().to_json()
    broken["active"]["version"] = corpus.VERSION + 1
    broken["active"]["rules"]["policies"] = broken["active"]["rules"]["policies"][1:]
    rules_server.serve_bytes(json.dumps(broken).encode())
    # Then it says so on its next poll
    wait_until(
        lambda: reported(
            rules_server, "Sluice-Rejected-Version", str(corpus.VERSION + 1)
        ),
        timeout=60,
        every=0.05,
        why="the refusal to be reported",
    )
    # and keeps deciding with the rules it had
    answer = call(port, "/v1/search", tenant="free-a")
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'


def test_nginx_module__altered_bundle__refused_by_its_hash(start_nginx, rules_server):
    # Given nginx that applied rules whose names need escaping in canonical JSON
    active = corpus.snapshot()
    odd = Snapshot.build(
        version=corpus.VERSION + 1,
        parent=corpus.VERSION,
        published_at=corpus.PUBLISHED,
        effective_at=corpus.PUBLISHED,
        rules=replace(
            active.rules,
            tiers={**active.rules.tiers, "free": 'Frëe "tier"\\\n\t\x01 ü ✓'},
        ),
    )
    rules_server.serve(Bundle(odd))
    port, _ = start_nginx(port_of(rules_server))
    wait_applied(rules_server, odd.version)
    # When the next bundle's content was altered after it was hashed
    altered = Bundle(odd).to_json()
    altered["active"]["version"] = odd.version + 1
    rules_server.serve_bytes(json.dumps(altered).encode())
    # Then it is refused and reported, and the rules in force stay
    wait_until(
        lambda: reported(rules_server, "Sluice-Rejected-Version", str(odd.version + 1)),
        timeout=60,
        every=0.05,
        why="the refusal to be reported",
    )
    reason = next(
        r["Sluice-Rejected-Reason"]
        for r in list(rules_server.requests)
        if "Sluice-Rejected-Reason" in r
    )
    assert "hash" in reason
    answer = call(port, "/v1/search", tenant="free-a")
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'


def _free_search_burst(active: Snapshot, burst: int) -> tuple:
    return tuple(
        replace(p, limits=(replace(p.limits[0], burst=burst),))
        if (p.scope, p.route) == ("tier:free", "search")
        else p
        for p in active.rules.policies
    )


@pytest.mark.parametrize("skew", [3600, -3600], ids=["an_hour_ahead", "an_hour_behind"])
def test_nginx_module__clock_an_hour_off__versions_judged_by_redis_time(
    redis_server, redis_client, backend, tmp_path, cache_dir, rules_server, skew
):
    # Given version N+1 (tier free's search burst 5) in effect for half an hour on
    # Redis's clock and version N+2 (burst 7) due in half an hour
    now = redis_client.time()[0]
    active = corpus.snapshot()

    def version(offset: int, burst: int, at: int) -> Snapshot:
        return Snapshot.build(
            version=corpus.VERSION + offset,
            parent=corpus.VERSION + offset - 1,
            published_at=corpus.PUBLISHED,
            effective_at=datetime.fromtimestamp(at, UTC),
            rules=replace(active.rules, policies=_free_search_burst(active, burst)),
        )

    rules_server.serve(
        Bundle(active, (version(1, 5, now - 1800), version(2, 7, now + 1800)))
    )
    # and nginx whose own clock is an hour off (the module's clock_offset seam)
    port = free_port()
    process = servers.nginx_module(
        tmp_path,
        port=port,
        backend=backend.port,
        control_plane=port_of(rules_server),
        redis=redis_server.port,
        token=rules_server.token,
        gateway_id="ngx-skewed",
        cache=cache_dir,
        options=f"clock_offset = {skew},",
    ).start()
    try:
        wait_applied(rules_server)
        # When a tier free tenant searches
        answer = call(port, "/v1/search", tenant="free-a")
    finally:
        process.stop()
    # Then version N+1 decided it, as on any gateway whatever its clock
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=5;w=72000'


def _forge_cache(cache_dir: Path) -> None:
    """Edit the cached rules (only the default policies left) and recompute every
    hash, as someone with write access to the gateway's disk would; the
    signature line stays as it was."""
    path = cache_dir / "sluice-rules.json"
    head, _, _body = path.read_bytes().partition(b"\n")
    active = corpus.snapshot()
    lax = replace(
        active.rules,
        policies=tuple(p for p in active.rules.policies if p.scope == "default"),
    )
    forged = Snapshot.build(
        version=active.version,
        parent=active.parent,
        published_at=active.published_at,
        effective_at=active.effective_at,
        rules=lax,
    )
    body = b'{"active":' + forged.to_bytes() + b',"scheduled":[]}'
    path.write_bytes(head + b"\n" + body)


def test_nginx_module__cache_edited_and_rehashed__refused_at_restart(
    start_nginx, rules_server, cache_dir
):
    # Given nginx that applied the corpus' rules and wrote them to its cache, then stopped
    _, first = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    first.stop()
    # When the cached rules are edited, hashes recomputed, and nginx starts again
    # while the control plane does not answer
    _forge_cache(cache_dir)
    port, restarted = start_nginx(free_port())
    answer = call(port, "/v1/search", tenant="free-a")
    # Then the file is refused with one line naming the signature, and the strict
    # built-in rules apply: neither the edited rules nor unlimited
    assert answer.headers["ratelimit-policy"] == '"ip-s";q=20;w=2'
    refusals = [
        line
        for line in restarted.log.read_text(errors="replace").splitlines()
        if "snapshot.cache_ignored" in line
    ]
    assert refusals
    assert all("does not match the bundle" in line for line in refusals)


def _following() -> bytes:
    """The bytes of a valid bundle of a later version (the corpus' rules)."""
    active = corpus.snapshot()
    later = Snapshot.build(
        version=corpus.VERSION + 10,
        parent=corpus.VERSION,
        published_at=active.published_at,
        effective_at=active.effective_at,
        rules=active.rules,
    )
    return b'{"active":' + later.to_bytes() + b',"scheduled":[]}'


def _other_key_signature(body: bytes) -> str:
    return sign(Ed25519PrivateKey.generate(), body)


@pytest.mark.parametrize(
    ("signer", "says"),
    [(lambda body: None, "not signed"), (_other_key_signature, "unknown key")],
    ids=["unsigned", "unknown-key"],
)
def test_nginx_module__unsigned_or_unknown_key__refused_reported_rules_stay(
    start_nginx, rules_server, signer, says
):
    # Given nginx that applied the corpus' rules
    port, process = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When the control plane serves a next version unsigned, or signed by another key
    body = _following()
    rules_server.serve_bytes(body, signature=signer(body))
    # Then it is refused, reported with the reason, and the rules in force stay
    wait_until(
        lambda: reported(
            rules_server, "Sluice-Rejected-Version", str(corpus.VERSION + 10)
        ),
        timeout=60,
        every=0.05,
        why="the refusal to be reported",
    )
    reasons = {
        r["Sluice-Rejected-Reason"]
        for r in list(rules_server.requests)
        if "Sluice-Rejected-Reason" in r
    }
    assert all(says in reason for reason in reasons)
    answer = call(port, "/v1/search", tenant="free-a")
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'
    logged = process.log.read_text(errors="replace").count("snapshot.rejected")
    assert logged == 1  # one line, though every poll fetched it again


def test_nginx_module__rotation_overlap__old_and_new_keys_both_accepted(
    start_nginx, rules_server, tmp_path
):
    # Given nginx configured, for a rotation's overlap, with the old and the new key
    new_key = Ed25519PrivateKey.generate()
    both = keys_file(tmp_path, KeyRing([TEST_SIGNING_KEY, new_key]))
    start_nginx(port_of(rules_server), public_keys=both)
    # When the control plane signs with the old key, then with the new one
    wait_applied(rules_server)
    body = _following()
    rules_server.serve_bytes(body, signature=sign(new_key, body))
    # Then both are applied
    wait_applied(rules_server, corpus.VERSION + 10)
