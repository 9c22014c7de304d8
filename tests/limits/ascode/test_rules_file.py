"""Rules as code: byte-stable export, diff and apply, and errors at their line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from limits.ascode.services import (
    RulesFileInvalid,
    rules_export,
    rules_file_apply,
    rules_file_diff,
    rules_file_read,
)
from limits.core.audit import Actor
from limits.diff.diffing import rules_diff
from limits.models import ChangeRequest, Tenant
from limits.publishing.services import snapshot_publish
from limits.rules.schema import schema_json
from limits.versions.selectors import snapshot_get_active, snapshot_rules
from sluice import yamlread
from sluice.rulesfile import RulesFileError, rules_from_yaml
from sluice.yamlread import dotted
from tests.celery_fixtures import broker_url, database_url
from tests.factories import PolicyFactory
from tests.hostile_input import BILLION_LAUGHS

ROOT = Path(__file__).resolve().parents[3]
SYSTEM = Actor.system("test")


@pytest.fixture
def active(rules, settings):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    PolicyFactory(override=True, tenant=rules["acme"], route=rules["search"])
    return snapshot_publish(actor=SYSTEM, message="v1")


def test_docs_schema__is_the_schema_the_code_checks_with():
    assert (ROOT / "docs" / "rules.schema.json").read_text() == schema_json()


def test_export__same_rules__same_bytes_in_a_fixed_order(active):
    first = rules_export()
    assert rules_export() == first
    data = yaml.safe_load(first)
    assert list(data) == ["format", "tiers", "tenants", "routes", "policies"]
    assert list(data["tenants"]) == sorted(data["tenants"])
    assert data["policies"][0] == {
        "scope": "default",
        "route": "*",
        "reason": data["policies"][0]["reason"],
        "limits": [{"dimension": "ip", "rate": 10, "period": "second", "burst": 20}],
    }
    # one limit per line, so a change is a one-line diff in git
    assert "  - {dimension: tenant, rate: 50, period: second, burst: 100}\n" in first
    assert rules_file_diff(rules_file_read(first)).equal


BAD_FILES = pytest.mark.parametrize(
    ("edit", "member", "said", "on_line"),
    [
        (
            lambda t: t.replace("burst: 100}", "burst: 0}"),
            "policies[2].limits[0].burst",
            "0 is less than the minimum of 1",
            "burst: 0",
        ),
        (
            lambda t: t.replace("tier: pro", "tier: gold", 1),
            "tenants.acme.tier",
            "unknown tier 'gold'",
            "tier: gold",
        ),
        (
            lambda t: t.replace("period: second", "period: fortnight", 1),
            "policies[0].limits[0].period",
            "is not one of",
            "fortnight",
        ),
        (
            lambda t: t.replace("path: /v1/search", "path: v1/search"),
            "routes.search.path",
            "path",
            "path: v1/search",
        ),
        (lambda t: t + "tiers: {}\n", "tiers", "given twice", "tiers: {}"),
        (
            lambda t: t.replace("  acme:\n", "  acme\n"),
            "(the file)",
            "not valid YAML",
            "",
        ),
        (
            lambda t: t.replace("format: 1", "format: 2"),
            "format",
            "1 was expected",
            "format: 2",
        ),
    ],
)


@BAD_FILES
def test_read__bad_file__error_names_its_line_and_member(
    active, edit, member, said, on_line
):
    text = edit(rules_export())
    with pytest.raises(RulesFileInvalid) as refused:
        rules_file_read(text, name="rules.yaml")
    problem = next(p for p in refused.value.problems if said in p.message)
    assert problem.shown("rules.yaml").startswith(
        f"rules.yaml:{problem.line}: {member}"
    )
    assert on_line in text.splitlines()[problem.line - 1]


def test_client_read__exported_file__the_active_versions_rules(active):
    # Given the export of the active version / When the client reads it (no control plane)
    rules = rules_from_yaml(rules_export())
    # Then it enforces what the control plane publishes
    published = snapshot_rules(active)
    assert (rules.tiers, rules.tenants, rules.routes) == (
        published.tiers,
        published.tenants,
        published.routes,
    )
    assert sorted(map(repr, rules.policies)) == sorted(map(repr, published.policies))


@BAD_FILES
def test_client_read__bad_file__same_lines_and_members_as_the_control_plane(
    active, edit, member, said, on_line
):
    # Given a bad file
    text = edit(rules_export())
    # When both sides read it
    with pytest.raises(RulesFileInvalid) as server:
        rules_file_read(text, name="rules.yaml")
    with pytest.raises(RulesFileError) as client:
        rules_from_yaml(text, name="rules.yaml")

    # Then they point at the same lines and members (whole-set checks: same words too)
    def where(problems):
        return sorted((p.line, dotted(p.path)) for p in problems)

    assert where(client.value.problems) == where(server.value.problems)
    if said == "unknown tier 'gold'":
        assert str(client.value) == "\n".join(server.value.messages)


def test_diff__file_lowers_a_tier__changes_in_words_with_tenants_reached(active):
    text = rules_export().replace(
        "{dimension: tenant, rate: 5, period: second, burst: 10}",
        "{dimension: tenant, rate: 3, period: second, burst: 6}",
    )
    found = rules_file_diff(rules_file_read(text))
    said = found.text()
    assert not found.equal
    assert (
        "lowered  tier free · all routes: per tenant: 5 / s, burst 10 → 3 / s" in said
    )
    assert "Tenants reached (1): initech." in said


def test_apply__file__opens_a_change_request_through_the_same_services(active):
    text = rules_export().replace("name: Acme", "name: ACME Corporation")
    done = rules_file_apply(rules_file_read(text), actor=SYSTEM, publish=True)
    assert done.change_request.origin == "file"
    assert done.published.version is None  # a name: nothing gateways see
    assert Tenant.objects.get(slug="acme").name == "ACME Corporation"
    assert rules_file_diff(rules_file_read(text)).equal


def test_command_diff__exit_codes__0_equal_2_differs_1_error(active, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(rules_export())
    call_command("rules", "diff", str(path))  # equal: returns, exit 0
    path.write_text(rules_export().replace("rate: 50,", "rate: 60,"))
    with pytest.raises(SystemExit) as differs:
        call_command("rules", "diff", str(path))
    assert differs.value.code == 2
    path.write_text("format: 1\n")
    with pytest.raises(CommandError) as error:
        call_command("rules", "diff", str(path))
    assert error.value.returncode == 1
    assert "rules.yaml:1: (the file): 'tiers' is missing" in str(error.value)


def test_command__aliases__refused_at_the_first_anchor_before_expanding(
    active, tmp_path
):
    # Given the billion laughs: a few hundred bytes whose aliases expand to 9**9 items
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)
    # When an operator diffs or applies it, Then it is refused at its first anchor
    for action in ("diff", "apply"):
        with pytest.raises(CommandError) as error:
            call_command("rules", action, str(path))
        assert error.value.returncode == 1
        assert str(error.value) == (
            "laughs.yaml:2: (the file): not valid YAML: "
            "anchors and aliases (&name, *name) are not allowed in a rules file"
        )
    # And an alias without an anchor is named at its own line
    path.write_text(rules_export().replace("tier: pro", "tier: *pro", 1))
    with pytest.raises(CommandError) as error:
        call_command("rules", "diff", str(path))
    line = int(str(error.value).split(":")[1])
    assert "tier: *pro" in path.read_text().splitlines()[line - 1]
    assert ChangeRequest.objects.count() == 0


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # a few bytes nested past the budget (libyaml refuses past 1,000 levels itself)
        ("tiers: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32 levels"),
        (
            "tiers: " + "{a: " * 40 + "1" + "}" * 40 + "\n",
            "nested deeper than 32 levels",
        ),
    ],
    ids=["deep_lists", "deep_mappings"],
)
def test_command__over_the_depth_budget__refused_at_its_line(
    active, tmp_path, text, said
):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(CommandError) as error:
        call_command("rules", "diff", str(path))
    assert said in str(error.value)
    assert str(error.value).startswith("deep.yaml:1: (the file): not valid YAML: ")


def test_yaml_read__over_the_size_or_node_budget__one_problem_nothing_parsed(
    monkeypatch,
):
    # Given budgets small enough to reach with a test file (the real ones: see sluice.yamlread)
    monkeypatch.setattr(yamlread, "MAX_CHARS", 1000)
    monkeypatch.setattr(yamlread, "MAX_NODES", 50)
    many = "tenants:\n" + "".join(
        f"  t{i}: {{name: T, tier: pro}}\n" for i in range(20)
    )
    # When files over each are read
    too_long, too_many = yamlread.yaml_read(" " * 1001), yamlread.yaml_read(many)
    # Then each is one problem saying which budget, with no data
    assert too_long.data is None
    assert [p.message for p in too_long.problems] == [
        "1,001 characters: a rules file may have at most 1,000"
    ]
    assert too_many.data is None
    (problem,) = too_many.problems
    assert "more than 50 values: too many for a rules file" in problem.message
    assert problem.line > 1  # where the budget ran out


@pytest.mark.parametrize(
    "scalar",
    [
        "t000001",
        "Tenant 12",
        "free",
        "5",
        "-3",
        "0x1F",
        "0o17",
        "1_000",
        "0.5",
        ".inf",
        "yes",
        "No",
        "on",
        "true",
        "False",
        "null",
        "~",
        "",
        "2026-12-03",
        "2026-12-03T10:00:00Z",
        "'5'",
        '"true"',
        "'null'",
        "<<x",
        "+1",
    ],
)
def test_yaml_read__plain_and_quoted_scalars__the_values_pyyaml_gives(scalar):
    # Given a scalar as a member's value (what a file holds: slugs, names, numbers)
    text = f"value: {scalar}\n"
    # When it is read
    read = yamlread.yaml_read(text)
    # Then it is what PyYAML's safe loader makes of it (times as the text JSON has)
    expected = yamlread._plain(yaml.load(text, Loader=yaml.SafeLoader)["value"])
    assert read.problems == []
    assert read.data == {"value": expected}
    assert type(read.data["value"]) is type(expected)


def test_apply_publish__file__the_versions_stored_diff_is_the_diff_of_its_rules(
    active,
):
    # Given a file that raises a tier's limit and renames a tenant
    text = (
        rules_export()
        .replace(
            "{dimension: tenant, rate: 5, period: second, burst: 10}",
            "{dimension: tenant, rate: 7, period: second, burst: 14}",
        )
        .replace("name: Acme", "name: ACME Corporation")
    )
    # When it is applied and published (its diff is reused for the version)
    done = rules_file_apply(rules_file_read(text), actor=SYSTEM, publish=True)
    # Then the version stores what diffing the two versions' rules gives
    assert done.not_published == ""
    row = done.published.version
    expected = rules_diff(
        snapshot_rules(active), snapshot_rules(row), at=row.effective_at
    )
    assert row.diff == expected.to_json()
    assert row.diff["counts"]["raised"] == 1


def _manage(
    *args: str, db: str, redis, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``manage.py`` as an operator runs it, on database ``db`` and the test's Redis
    (``env``: more variables)."""
    env = {
        **os.environ,
        "DATABASE_URL": db,
        "REDIS_URL": redis.url,
        "CELERY_BROKER_URL": broker_url(redis),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # stops a command that hangs; a loaded machine starts Django slowly
    )


@pytest.mark.django_db(transaction=True)
def test_round_trip__export_edit_diff_apply_into_a_fresh_database__same_bytes_and_digest(
    rules, fresh_database, tmp_path, redis_server
):
    here, there = database_url(), fresh_database
    # Given the rules of this control plane, exported from the command line
    snapshot_publish(actor=SYSTEM, message="v1")
    exported = _manage("rules", "export", db=here, redis=redis_server)
    assert exported.returncode == 0, exported.stderr
    # When someone edits the file (a raise) and checks it: exit 2, the change in words
    edited = exported.stdout.replace(
        "rate: 50, period: second, burst: 100", "rate: 80, period: second, burst: 160"
    )
    path = tmp_path / "rules.yaml"
    path.write_text(edited)
    diff = _manage("rules", "diff", str(path), db=here, redis=redis_server)
    assert diff.returncode == 2, diff.stderr
    usage = _manage("rules", "diff", db=here, redis=redis_server)  # no file: an error
    assert (usage.returncode, "required: file" in usage.stderr) == (1, True)
    assert (
        "raised   tier pro · search: per tenant: 50 / s, burst 100 → 80 / s, burst 160"
        in diff.stdout
    )
    assert "Tenants reached (1): acme." in diff.stdout
    # And applies it, published, here and into a fresh database
    assert _manage("migrate", "-v0", db=there, redis=redis_server).returncode == 0
    for db in (here, there):
        applied = _manage(
            "rules", "apply", str(path), "--publish", db=db, redis=redis_server
        )
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert "Published as version" in applied.stdout
    # Then exporting there gives the same bytes, and the same rules digest as here
    again = _manage("rules", "export", db=there, redis=redis_server)
    assert again.stdout == edited
    digest = _manage(
        "shell",
        "-c",
        "from limits.versions.selectors import snapshot_get_active as a; "
        "print(a().rules_digest)",
        db=there,
        redis=redis_server,
    )
    assert digest.stdout.splitlines()[-1] == snapshot_get_active().rules_digest
    assert (
        _manage("rules", "diff", str(path), db=there, redis=redis_server).returncode
        == 0
    )
    assert ChangeRequest.objects.get().state == "published"


@pytest.fixture
def windowed(rules, settings):
    """The active version holds a pro policy on orders.read of 100 in any minute per user."""
    from limits.choices import Dimension, LimitKind, ScopeKind
    from limits.models import Limit, Policy
    from limits.rules import services

    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    policy = Policy(scope=ScopeKind.TIER, tier=rules["pro"], route=rules["orders"])
    window = Limit(
        kind=LimitKind.SLIDING_WINDOW,
        dimension=Dimension.USER,
        rate=100,
        period=60,
        burst=None,
    )
    services.policy_save(policy=policy, limits=[window], actor=SYSTEM)
    return snapshot_publish(actor=SYSTEM, message="windows")


WINDOW = "{kind: sliding_window, dimension: user, limit: 100, window: minute}"


def test_round_trip__sliding_window__exported_read_by_both_sides_unchanged(windowed):
    # Given the export of a version with a sliding window
    text = rules_export()
    # Then the window is written in the snapshot's words
    assert WINDOW in text
    # And the file reads back as the same rules, by the control plane and the client
    assert rules_file_diff(rules_file_read(text)).equal
    client_policies = rules_from_yaml(text).policies
    assert sorted(map(repr, client_policies)) == sorted(
        map(repr, snapshot_rules(windowed).policies)
    )


def test_apply_publish__sliding_window_raised__stored_and_published(windowed):
    from limits.models import Limit

    # Given a file that raises the window to 200 in any minute
    text = rules_export().replace(WINDOW, WINDOW.replace("100", "200"))
    # When it is applied and published
    done = rules_file_apply(rules_file_read(text), actor=SYSTEM, publish=True)
    # Then the row is still a window, of 200, and the version says it was raised
    assert done.not_published == ""
    (row,) = Limit.objects.filter(kind="sliding_window")
    assert (row.rate, row.period, row.burst) == (200, 60, None)
    assert done.published.version.diff["counts"]["raised"] == 1
    assert rules_file_diff(rules_file_read(text)).equal


@pytest.mark.parametrize(
    ("member", "said"),
    [
        ("burst: 10", "unknown member(s): burst"),
        ("window: fortnight", "'fortnight' is not one of"),
    ],
    ids=["burst", "bad window"],
)
def test_read__sliding_window_with_a_bad_member__named_at_its_line(
    windowed, member, said
):
    written = WINDOW.replace("window: minute", member)
    if not member.startswith("window"):
        written = WINDOW.replace("}", f", {member}}}")
    text = rules_export().replace(WINDOW, written)
    with pytest.raises(RulesFileInvalid) as caught:
        rules_file_read(text, name="rules.yaml")
    (problem,) = caught.value.problems
    assert said in problem.message
    assert written in text.splitlines()[problem.line - 1]
