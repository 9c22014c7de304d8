"""Promotion between two installations: staging (a database of its own, driven by the
command line) and production (this test database, served by a live server), as a
CI pipeline would do it on merge."""

from __future__ import annotations

import pytest

from limits.ascode.services import rules_export
from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, ChangeRequest, Tenant
from limits.publishing.services import snapshot_publish
from limits.versions.selectors import snapshot_get_active
from tests.limits.ascode.test_rules_file import _manage

SYSTEM = Actor.system("test")


def _digest(db: str, redis) -> str:
    shown = _manage(
        "shell",
        "-c",
        "from limits.versions.selectors import snapshot_get_active as a; "
        "print(a().rules_digest)",
        db=db,
        redis=redis,
    )
    return shown.stdout.splitlines()[-1]


@pytest.mark.django_db(transaction=True)
def test_promote__staging_to_production__same_rules_digest_on_both_sides(
    rules, settings, product_user, live_server, fresh_database, tmp_path, redis_server
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    # Given production (served here) with its first version and a CI token of its own
    snapshot_publish(actor=SYSTEM, message="v1")
    token = token_create(token=ApiToken(user=product_user, name="ci"), actor=SYSTEM)
    staging = fresh_database
    assert _manage("migrate", "-v0", db=staging, redis=redis_server).returncode == 0
    # And staging, where a merged change onboarded a customer
    merged = rules_export().replace(
        "\nroutes:\n", "\n  hooli:\n    name: Hooli\n    tier: free\nroutes:\n", 1
    )
    path = tmp_path / "rules.yaml"
    path.write_text(merged)
    applied = _manage(
        "rules", "apply", str(path), "--publish", db=staging, redis=redis_server
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    staging_export = tmp_path / "staging.yaml"
    _manage(
        "rules", "export", "-o", str(staging_export), db=staging, redis=redis_server
    )
    env = {"SLUICE_TARGET_TOKEN": token}
    # When CI diffs staging's rules against production: they differ (exit 2)
    before = _manage(
        "rules",
        "diff",
        str(staging_export),
        "--against",
        live_server.url,
        db=staging,
        redis=redis_server,
        env=env,
    )
    assert before.returncode == 2, before.stdout + before.stderr
    assert "new tenant hooli on tier free" in before.stdout
    assert f"{live_server.url} {snapshot_get_active().rules_digest}" in before.stdout
    # And promotes them, published
    promoted = _manage(
        "rules",
        "promote",
        "--to",
        live_server.url,
        "--publish",
        db=staging,
        redis=redis_server,
        env=env,
    )
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    # Then production holds staging's rules: the same digest on both sides
    assert Tenant.objects.filter(slug="hooli").exists()
    assert snapshot_get_active().rules_digest == _digest(staging, redis_server)
    (request,) = ChangeRequest.objects.all()
    assert (request.state, request.author_name) == ("published", product_user.username)
    # And a second diff finds nothing to do (exit 0)
    after = _manage(
        "rules",
        "diff",
        str(staging_export),
        "--against",
        live_server.url,
        db=staging,
        redis=redis_server,
        env=env,
    )
    assert after.returncode == 0, after.stdout + after.stderr


@pytest.mark.django_db(transaction=True)
def test_promote__without_a_token__refused_before_anything_is_sent(
    fresh_database, redis_server, monkeypatch
):
    monkeypatch.delenv("SLUICE_TARGET_TOKEN", raising=False)
    assert (
        _manage("migrate", "-v0", db=fresh_database, redis=redis_server).returncode == 0
    )
    done = _manage(
        "rules",
        "promote",
        "--to",
        "http://127.0.0.1:9",
        db=fresh_database,
        redis=redis_server,
    )
    assert done.returncode == 1
    assert "Give an API token of the other side" in done.stderr
