"""Fleet status: each gateway judged against the active version from its last report."""

import pytest

from limits.core.store import redis_client
from limits.gateways.fleet import GatewayState, fleet_status
from limits.gateways.keys import FLEET_KEY
from limits.gateways.reports import GatewayReport, parse_gateway_id, report_json

NOW = 1_800_000_000.0


def fleet_record(report: GatewayReport) -> None:
    """Store ``report`` as a poll does (the poll's Lua script, or the window's flush)."""
    redis_client().hset(FLEET_KEY, report.gateway, report_json(report))


def _report(gateway, applied, seen_ago=1.0, rejected=None, reason=""):
    return GatewayReport(
        gateway, applied, rejected, reason, NOW - seen_ago, "slg_abcd1234", "127.0.0.1"
    )


@pytest.mark.parametrize(
    ("report", "active_since_ago", "state"),
    [
        (_report("gw", 7), 600, GatewayState.IN_SYNC),
        (_report("gw", 6), 10, GatewayState.UPDATING),
        (_report("gw", 6), 600, GatewayState.STALE),
        (_report("gw", None), 600, GatewayState.STALE),
        (_report("gw", 6, rejected=7, reason="hash mismatch"), 600, GatewayState.ERROR),
        (_report("gw", 7, seen_ago=3600), 600, GatewayState.SILENT),
    ],
)
def test_fleet_status__report__judged_against_active_version(
    redis_client, settings, report, active_since_ago, state
):
    # Given thresholds of a minute and a gateway's last report
    settings.SLUICE_FLEET_SILENT_AFTER = 60
    settings.SLUICE_FLEET_STALE_AFTER = 60
    fleet_record(report)
    # When the fleet is judged against active version 7
    status = fleet_status(
        active_version=7, active_since=NOW - active_since_ago, now=NOW
    )
    # Then the gateway has the expected state
    assert [(g.report.gateway, g.state) for g in status.gateways] == [("gw", state)]


def test_fleet_status__several_gateways__counted_per_version(redis_client):
    for name, version in [("a", 7), ("b", 7), ("c", 6)]:
        fleet_record(_report(name, version))
    status = fleet_status(active_version=7, active_since=NOW, now=NOW)
    assert status.versions == {6: 1, 7: 2}


def test_fleet_record__same_gateway_twice__latest_report_wins(redis_client):
    fleet_record(_report("gw", 6))
    fleet_record(_report("gw", 7))
    assert [
        g.report.applied
        for g in fleet_status(active_version=7, active_since=NOW, now=NOW).gateways
    ] == [7]


@pytest.mark.parametrize("value", ["", "has space", "x" * 101, "../etc"])
def test_parse_gateway_id__bad_value__refused(value):
    with pytest.raises(ValueError, match="characters"):
        parse_gateway_id(value)
