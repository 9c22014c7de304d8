"""`.ci/setup`, the one setup step of `make test` and `.ci/run`: its package list and when it calls apt.

Each test runs the real script from a copy of `.ci/` with a list of its own. apt-get
(and sudo) are stand-ins on the PATH that write down how they were called: the tests
check what the script asks of apt, never install anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.celery_fixtures import wait_until

ROOT = Path(__file__).resolve().parent.parent
#: Seconds the script may take: it only stops one that hangs (a loaded machine is slow
#: to start the shells and tools it runs).
SCRIPT_TIMEOUT = 120
RECORDER = """#!/bin/sh
# Stands in for {name}: writes down its arguments (and DEBIAN_FRONTEND), installs nothing.
echo "{name} $* DEBIAN_FRONTEND=${{DEBIAN_FRONTEND:-}}" >> "{calls}"
"""
SUDO = """#!/bin/sh
# Stands in for sudo (the tests may run as root or not): runs the command as it is.
exec "$@"
"""


@pytest.fixture
def checkout(tmp_path):
    """A directory with `.ci/setup` and room for its list, and a PATH whose apt-get records."""
    (tmp_path / ".ci").mkdir()
    shutil.copy2(ROOT / ".ci" / "setup", tmp_path / ".ci" / "setup")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls"
    (bin_dir / "apt-get").write_text(RECORDER.format(name="apt-get", calls=calls))
    (bin_dir / "sudo").write_text(SUDO)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return tmp_path


def _env(checkout: Path) -> dict[str, str]:
    """This environment, the recording apt-get first on the PATH, DEBIAN_FRONTEND unset."""
    env = {k: v for k, v in os.environ.items() if k != "DEBIAN_FRONTEND"}
    return {**env, "PATH": f"{checkout / 'bin'}:{env['PATH']}"}


def _setup(checkout: Path, packages: str, *args: str) -> subprocess.CompletedProcess:
    (checkout / ".ci" / "apt-packages").write_text(packages)
    env = _env(checkout)
    return subprocess.run(
        [str(checkout / ".ci" / "setup"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
        check=False,
    )


def _apt_calls(checkout: Path) -> list[str]:
    calls = checkout / "apt-calls"
    return calls.read_text().splitlines() if calls.exists() else []


LIST = """# Debian package, then the command that shows it is installed (when it differs).
sh
coreutils ls

   # an indented comment, then a package whose command differs and is absent
sluice-test-absent sluice-test-no-such-command
sluice-test-no-such-package
findutils find"""  # the last line has no newline


def test_setup_missing__list_with_comments_and_blanks__names_packages_whose_command_is_absent(
    checkout,
):
    # Given a list of present and absent commands, comments, a blank line, no final newline
    # When asking which packages are missing
    result = _setup(checkout, LIST, "missing")
    # Then exactly the two whose command is not on the PATH, in list order, and no apt
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "sluice-test-absent",
        "sluice-test-no-such-package",
    ]
    assert _apt_calls(checkout) == []


def test_setup_missing__library_named_by_its_file__missing_only_when_the_file_is_absent(
    checkout, tmp_path
):
    # Given a library whose file is there and one whose file is not
    present = tmp_path / "libpresent.so"
    present.write_text("")  # not executable: a library, not a command
    listed = f"lib-present {present}\nlib-absent {tmp_path / 'libabsent.so'}\n"
    # When asking which packages are missing
    result = _setup(checkout, listed, "missing")
    # Then only the one whose file is absent
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["lib-absent"]


def test_setup_packages__nothing_missing__no_apt_get_at_all(checkout):
    # Given a list whose every command is on the PATH
    present = "# all here\nsh\ncoreutils ls\nfindutils find\n"
    # When setting up the packages
    result = _setup(checkout, present, "packages")
    # Then apt-get is not called (not even update) and nothing is printed
    assert result.returncode == 0, result.stderr
    assert _apt_calls(checkout) == []
    assert result.stdout == ""


def test_setup_packages__some_missing__one_update_then_one_install_of_those(checkout):
    # Given a list with two absent packages (and an apt-get that installs nothing)
    # When setting up the packages
    result = _setup(checkout, LIST, "packages")
    # Then apt-get updates once and installs just those two, non-interactively
    assert _apt_calls(checkout) == [
        "apt-get update -qq DEBIAN_FRONTEND=",
        "apt-get install -y -qq sluice-test-absent sluice-test-no-such-package"
        " DEBIAN_FRONTEND=noninteractive",
    ]
    assert (
        "installing Debian packages: sluice-test-absent sluice-test-no-such-package"
        in (result.stdout)
    )
    # And, the commands still absent after the install, it fails saying which
    assert result.returncode == 1
    assert (
        "still missing after apt-get install: sluice-test-absent sluice-test-no-such-package"
        in result.stderr
    )


def test_setup__no_list__fails_before_doing_anything(checkout):
    # Given a checkout without .ci/apt-packages
    (checkout / ".ci" / "apt-packages").unlink(missing_ok=True)
    # When running the whole setup
    result = subprocess.run(
        [str(checkout / ".ci" / "setup")],
        env=_env(checkout),
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
        check=False,
    )
    # Then it stops, naming the list, and calls no apt
    assert result.returncode == 1
    assert ".ci/apt-packages is missing" in result.stderr
    assert _apt_calls(checkout) == []


def test_apt_packages__the_repository_list__names_what_the_suite_runs():
    # Given the repository's own list, read the way .ci/setup reads it
    rows = [
        line.split()
        for line in (ROOT / ".ci" / "apt-packages").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    commands = {row[1] if len(row) > 1 else row[0] for row in rows}
    # Then it holds the tools the suite, .ci/setup and make run start
    assert {
        "redis-server",
        "redis-cli",
        "pg_isready",
        "pg_ctlcluster",
        "chromium",
        "stress-ng",  # make test-loaded (.ci/loaded)
        # nginx with Sluice's Lua module (tests/conformance/test_nginx_module.py)
        "/usr/lib/nginx/modules/ngx_http_lua_module.so",
        "/usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so",
        "/usr/share/lua/5.1/nginx/redis.lua",
    } <= commands
    assert all(1 <= len(row) <= 2 for row in rows), rows


def _stress_ng_pids() -> set[int]:
    found = subprocess.run(
        ["pgrep", "-x", "stress-ng"], capture_output=True, text=True, check=False
    )
    return {int(pid) for pid in found.stdout.split()}


def test_loaded__command_fails__its_exit_status_and_no_load_left_behind():
    # Given the load that may already run (make test-loaded runs this test under one)
    before = _stress_ng_pids()
    # When .ci/loaded runs a command that lists the stress-ng processes, then fails
    result = subprocess.run(
        [
            str(ROOT / ".ci" / "loaded"),
            "sh",
            "-c",
            "sleep 1; pgrep -x stress-ng; exit 3",
        ],
        env={**os.environ, "LOAD_FACTOR": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then the command ran beside a load of its own, and its status is the script's
    started = {int(pid) for pid in result.stdout.split() if pid.isdigit()} - before
    assert started, result.stdout + result.stderr
    assert result.returncode == 3
    assert f"beside {len(os.sched_getaffinity(0))} CPU hogs" in result.stdout
    # and nothing of that load outlives it
    wait_until(
        lambda: not (started & _stress_ng_pids()),
        timeout=60,
        every=0.1,
        why="the load's stress-ng processes to end",
    )
