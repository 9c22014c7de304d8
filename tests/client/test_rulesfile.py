"""Rules from a file without the control plane: YAML or JSON, errors at their line, reloads."""

from __future__ import annotations

import json
import logging
import os

import pytest

from sluice import Bundle, RulesFile, RulesFileError, SnapshotError, rules_from_file
from sluice.bundle import fallback_snapshot
from tests.client.factories import limit, policy, rules, snapshot

RULES_YAML = """\
format: 1
tiers:
  free: {name: Free, position: 0}
tenants:
  acme: {name: Acme, tier: free}
routes:
  search: {methods: [GET], path: /v1/search, failure_mode: closed}
policies:
- scope: default
  route: '*'
  limits:
  - {dimension: ip, rate: 10, period: second, burst: 20}
- scope: tier:free
  route: search
  limits:
  - {dimension: tenant, rate: 5, period: minute, burst: 10}
  - {dimension: user, max_inflight: 2}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rules_from_file__yaml__the_rules_it_says(tmp_path):
    # Given a rules-as-code file
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML)
    # When it is read
    bundle = rules_from_file(path)
    # Then its rules, defaults filled in, caps apart from rate limits
    found = bundle.active.rules
    assert found.tenants == {"acme": "free"}
    assert found.routes["search"].failure_mode.value == "closed"
    free = next(p for p in found.policies if p.scope == "tier:free")
    assert [(lim.rate, lim.period, lim.burst) for lim in free.limits] == [(5, 60, 10)]
    assert [cap.max_inflight for cap in free.concurrency] == [2]
    assert rules_from_file(path).active.hash == bundle.active.hash  # stable


@pytest.mark.parametrize(
    ("edit", "shown"),
    [
        (
            ("rate: 5,", "rate: 0,"),
            "rules.yaml:16: policies[1].limits[0].rate: must be",
        ),
        (
            ("tier: free}", "tier: gold}"),
            "rules.yaml:5: tenants.acme.tier: unknown tier",
        ),
        (
            ("period: minute", "period: week"),
            "rules.yaml:16: policies[1].limits[0].period",
        ),
        (("path: /v1/search", "path: v1/search"), "rules.yaml:7: routes.search.path"),
        (
            ("  acme:", "  acme:\n  acme:"),
            "rules.yaml:6: tenants.acme: tenants.acme is given",
        ),
        (
            ("format: 1", "format: 2"),
            "rules.yaml:1: format: 2: this client reads format 1",
        ),
        (
            ("burst: 20}", "burst: 20, colour: red}"),
            "rules.yaml:12: policies[0].limits[0]: unknown",
        ),
    ],
)
def test_rules_from_file__bad_yaml__every_problem_at_its_line(tmp_path, edit, shown):
    # Given a file with one mistake
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML.replace(*edit))
    # When it is read / Then the error names the line and member
    with pytest.raises(RulesFileError) as refused:
        rules_from_file(path)
    assert any(
        line.startswith(shown.replace("rules.yaml", str(path)))
        for line in str(refused.value).splitlines()
    ), str(refused.value)


def test_rules_from_file__two_mistakes__both_reported(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML.replace("rate: 5,", "rate: 0,").replace("ip,", "eye,"))
    with pytest.raises(RulesFileError) as refused:
        rules_from_file(path)
    assert [p.line for p in refused.value.problems] == [12, 16]


def test_rules_from_file__snapshot_or_bundle_json__as_served(tmp_path):
    # Given a snapshot and a bundle as the control plane serves them
    v1 = snapshot(rules(policy("default", "search", limit("ip", 5, 1, 5))))
    (tmp_path / "snapshot.json").write_bytes(v1.to_bytes())
    (tmp_path / "bundle.json").write_text(json.dumps(Bundle(v1).to_json()))
    # When they are read / Then the same snapshot, hash checked
    assert rules_from_file(tmp_path / "snapshot.json").active.hash == v1.hash
    assert rules_from_file(tmp_path / "bundle.json").active.hash == v1.hash
    (tmp_path / "bad.json").write_bytes(v1.to_bytes().replace(b'"rate":5', b'"rate":6'))
    with pytest.raises(SnapshotError, match="hash"):
        rules_from_file(tmp_path / "bad.json")


def test_rules_file__changed_file__reloaded_after_check_every(tmp_path):
    # Given a provider over a file, with a clock the test moves
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML)
    clock = Clock()
    source = RulesFile(path, check_every=1.0, clock=clock)
    first = source.current()
    # When the file changes
    path.write_text(RULES_YAML.replace("rate: 5,", "rate: 7,"))
    os.utime(path, (1, 1))  # a new stamp even within the file system's resolution
    # Then the old rules hold until the next check, the new ones after
    assert source.current() is first
    clock.now = 1.0
    changed = source.current()
    free = next(p for p in changed.rules.policies if p.scope == "tier:free")
    assert free.limits[0].rate == 7


def test_rules_file__bad_edit__keeps_the_rules_in_force_and_logs(tmp_path, caplog):
    path = tmp_path / "rules.yaml"
    path.write_text(RULES_YAML)
    clock = Clock()
    source = RulesFile(path, clock=clock)
    good = source.current()
    path.write_text(RULES_YAML.replace("rate: 5,", "rate: 0,"))
    os.utime(path, (1, 1))
    clock.now = 5.0
    with caplog.at_level(logging.WARNING, logger="sluice"):
        assert source.current() is good
    assert "rules_file.ignored" in caplog.text
    assert "policies[1].limits[0].rate" in caplog.text


def test_rules_file__bad_first_read__raises_unless_not_strict(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("format: [")
    with pytest.raises(RulesFileError, match="not valid YAML"):
        RulesFile(path)
    lenient = RulesFile(path, strict=False)
    assert lenient.current().hash == fallback_snapshot().hash
