"""SnapshotSource against a local server that speaks docs/gateway-protocol.md."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
from datetime import timedelta

import pytest

from sluice import Bundle
from sluice.bundle import read_bundle_file
from sluice.source import PollResult, SnapshotSource
from tests.celery_fixtures import wait_until
from tests.client.factories import PUBLISHED, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer
from tests.signing import TEST_KEYS

V1 = snapshot(rules(policy("default", "search", limit("ip", 5, 1, 5))), version=1)
V2 = snapshot(rules(policy("default", "search", limit("ip", 7, 1, 7))), version=2)


@pytest.fixture
def control_plane():
    server = ProtocolServer().start()
    server.serve(Bundle(V1))
    yield server
    server.stop()


@pytest.fixture
def make_source(control_plane, tmp_path):
    sources = []

    def make(url=None, **options):
        options.setdefault("cache_path", tmp_path / "bundle.json")
        # a poll's own timeout (2 s by default) no answer of the in-process server
        # reaches, however loaded the machine: a poll fails only when the test says
        options.setdefault("timeout", 30.0)
        source = SnapshotSource(
            url or control_plane.url,
            control_plane.token,
            gateway_id="gw-1",
            **{
                "public_keys": TEST_KEYS,
                "rng": lambda: 0.5,
                **options,
            },  # rng 0.5: no jitter, exact delays
        )
        sources.append(source)
        return source

    yield make
    for source in sources:
        source.stop()


def test_poll__first_contact__applies_bundle_and_identifies_the_gateway(
    control_plane, make_source
):
    # Given a gateway with nothing yet (built-in rules)
    source = make_source()
    assert source.current().version == 0
    # When it polls
    result = source.poll_once()
    # Then it enforces version 1, and said who it is without claiming a version
    sent = control_plane.requests[-1]
    assert result is PollResult.APPLIED
    assert source.current().version == 1
    assert sent["Authorization"] == "Bearer gw_test_token"
    assert sent["Sluice-Gateway-Id"] == "gw-1"
    assert sent["Accept-Encoding"] == "gzip"
    assert "Sluice-Applied-Version" not in sent
    assert "If-None-Match" not in sent


def test_poll__unchanged__sends_etag_and_version_and_gets_304(
    control_plane, make_source
):
    source = make_source()
    source.poll_once()
    result = source.poll_once()
    sent = control_plane.requests[-1]
    assert result is PollResult.NOT_MODIFIED
    assert sent["If-None-Match"] == control_plane.etag
    assert sent["Sluice-Applied-Version"] == "1"


def test_poll__bad_bundle__keeps_the_old_one_and_reports_it_next_poll(
    control_plane, make_source
):
    # Given a gateway on version 1
    source = make_source()
    source.poll_once()
    # When the control plane serves a version 2 whose content does not match its hash
    document = Bundle(V2).to_json()
    document["active"]["rules"]["policies"][0]["limits"][0]["rate"] = 9999
    control_plane.serve_bytes(json.dumps(document).encode())
    result = source.poll_once()
    source.poll_once()
    # Then version 1 stays in force, and the next poll names the rejected version and why
    sent = control_plane.requests[-1]
    assert result is PollResult.REJECTED
    assert source.current().version == 1
    assert sent["Sluice-Applied-Version"] == "1"
    assert sent["Sluice-Rejected-Version"] == "2"
    assert "hash" in sent["Sluice-Rejected-Reason"]


@pytest.mark.parametrize("status", [500, 401])
def test_poll__error_status__backs_off_and_keeps_the_rules(
    control_plane, make_source, status
):
    # Given a gateway on version 1, polling every 5 s
    source = make_source(interval=5.0, max_backoff=30.0)
    source.poll_once()
    # When the control plane keeps failing
    control_plane.fail_with = status
    results = [source.poll_once() for _ in range(4)]
    # Then the delay grows up to the cap (drawn between the interval and it:
    # rng 0.5 gives the middle), and the rules stay
    assert results == [PollResult.FAILED] * 4
    assert source.next_delay() == 17.5
    assert source.current().version == 1
    # And the first good answer resets the delay
    control_plane.fail_with = None
    assert source.poll_once() is PollResult.NOT_MODIFIED
    assert source.next_delay() == 5.0


@pytest.mark.parametrize("draw", [0.0, 0.5, 0.999])
def test_next_delay__long_outage__never_past_twice_the_interval(
    control_plane, make_source, draw
):
    # Given a gateway polling every 2 s (the default cap: twice the interval)
    source = make_source(interval=2.0, rng=lambda: draw)
    # When the control plane has failed a hundred polls in a row
    control_plane.fail_with = 503
    for _ in range(100):
        source.poll_once()
    # Then the next poll still comes between 2 and 4 s later, spread by the draw
    # so that a fleet does not come back at once
    assert source.next_delay() == pytest.approx(2.0 + 2.0 * draw)


def test_start__control_plane_unreachable__starts_from_the_file_on_disk(
    control_plane, make_source
):
    # Given a gateway that applied version 1 and wrote it to disk
    make_source().poll_once()
    control_plane.stop()
    # When a new gateway starts while the control plane is down
    restarted = make_source(url="http://127.0.0.1:9/api/v1/snapshot", timeout=0.5)
    result = restarted.poll_once()
    # Then it enforces version 1 from the file, and keeps it
    assert result is PollResult.FAILED
    assert restarted.current().version == 1
    assert restarted.etag is not None


def test_start__corrupt_file__ignored_with_one_log_line_and_strict_fallback(
    make_source, tmp_path, caplog
):
    # Given a file on disk that is not a bundle
    (tmp_path / "bundle.json").write_bytes(b'{"etag": "x", "bundle": {"acti')
    # When a gateway starts
    with caplog.at_level(logging.WARNING, logger="sluice.source"):
        source = make_source()
    # Then it says so once and enforces the built-in strict rules
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "snapshot.cache_ignored"
    ]
    snapshot_ = source.current()
    assert snapshot_.version == 0
    assert [p.limits[0].dimension.value for p in snapshot_.rules.policies] == ["ip"]


def in_an_hour(control_plane, make_source):
    """A source that applied a bundle whose version 2 takes effect in an hour
    (a minute before it, by its clock); returns the source, its clock and that hour."""
    later = PUBLISHED + timedelta(hours=1)
    scheduled = snapshot(V2.rules, version=2, effective_at=later)
    control_plane.serve(Bundle(V1, (scheduled,)))
    clock = [later.timestamp() - 60]
    source = make_source(wall=lambda: clock[0])
    source.poll_once()
    return source, clock, later


def test_current__scheduled_snapshot__takes_over_at_its_time_while_unreachable(
    control_plane, make_source
):
    # Given a bundle whose version 2 takes effect in an hour
    source, clock, later = in_an_hour(control_plane, make_source)
    before = source.current().version
    # When the control plane is down and the hour has passed
    control_plane.stop()
    clock[0] = later.timestamp()
    # Then version 2 is in force without any poll
    assert before == 1
    assert source.current().version == 2


def test_apply__cache_file__complete_bundle_and_no_temporary_left(
    make_source, tmp_path
):
    source = make_source()
    source.poll_once()
    signed = read_bundle_file(tmp_path / "bundle.json", TEST_KEYS)
    assert signed.bundle == source.bundle
    assert signed.etag == source.etag
    assert [p.name for p in tmp_path.iterdir()] == ["bundle.json"]


def test_start__background_thread__applies_while_requests_read_memory(make_source):
    # Given a source polling in its thread every 50 ms
    source = make_source(interval=0.05).start()
    # When requests read the current snapshot meanwhile (they never block)
    wait_until(
        lambda: source.current().version == 1,
        timeout=60,
        every=0.01,
        why="the thread to apply version 1",
    )
    # Then the thread applied version 1, and stops on request
    assert source.current().version == 1
    source.stop()
    assert source._thread is None


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs to fill: a real full disk (needs mount rights: root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_cache__disk_full_then_freed__written_by_the_next_304_poll(
    control_plane, make_source, small_disk, caplog
):
    # Given a gateway whose last good bundle (version 1) is on a small disk
    cache = small_disk / "bundle.json"
    source = make_source(cache_path=cache)
    source.poll_once()
    # When the disk fills up, version 2 is published and applied (its write
    # fails), and the next polls get 304
    filler = small_disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as out:
        while True:
            out.write(b"x" * 1024)
    control_plane.serve(Bundle(V2))
    assert source.poll_once() is PollResult.APPLIED
    assert source.poll_once() is PollResult.NOT_MODIFIED
    stale = read_bundle_file(cache, TEST_KEYS).bundle
    failed_writes = caplog.text.count("snapshot.cache_write_failed")
    # and space comes back, and the gateway polls again (304 once more)
    filler.unlink()
    assert source.poll_once() is PollResult.NOT_MODIFIED
    # Then the file holds version 2 now: a restart comes back on the newest rules
    assert stale.active.version == 1
    assert failed_writes == 1  # one line per episode, though every poll tried
    assert source.unsaved is None
    restarted = make_source(cache_path=cache, url="http://127.0.0.1:9/api/v1/snapshot")
    assert restarted.current().version == 2
    assert restarted.etag == control_plane.etag


def test_poll__version_scheduled__reports_that_it_rehearses_it(
    control_plane, make_source
):
    # Given a bundle whose version 2 takes effect in an hour
    source, clock, later = in_an_hour(control_plane, make_source)
    # When it polls again before, then after, version 2 takes effect
    source.poll_once()
    before = control_plane.requests[-1]
    clock[0] = later.timestamp()
    source.poll_once()
    after = control_plane.requests[-1]
    # Then it reported rehearsing version 2 until version 2 was in force
    assert before["Sluice-Rehearsed-Version"] == "2"
    assert "Sluice-Rehearsed-Version" not in after
    assert source.upcoming() is None
