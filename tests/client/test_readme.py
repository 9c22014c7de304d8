"""The client's README (its PyPI page) works as written: its rules file, app and test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "client" / "README.md"


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(\w*)\n(.*?)```", README.read_text(), re.S)


def test_readme__quick_start_and_its_test__run_as_written(tmp_path):
    # Given the README's rules.yaml, app.py, conftest.py and test_app.py, as a reader copies them
    blocks = _blocks()
    rules = next(body for kind, body in blocks if kind == "yaml")
    app = next(body for kind, body in blocks if "def build_app" in body)
    tests = next(body for kind, body in blocks if body.startswith("# conftest.py"))
    conftest, test_app = tests.split("# test_app.py\n")
    for name, body in [
        ("rules.yaml", rules),
        ("app.py", app),
        ("conftest.py", conftest),
        ("test_app.py", test_app),
    ]:
        (tmp_path / name).write_text(body)
    # When the test runs there, on its own (no Redis, none of the suite's settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:django", "-p", "no:xdist"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    # Then it passes: five searches, a 429, and one more once the clock has moved
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
