"""What an app's conftest.py needs to test with Sluice: the fixtures, and the rules."""

from pathlib import Path

import pytest

pytest_plugins = [
    "sluice.testing"
]  # sluice_limiter, sluice_async_limiter, sluice_clock


@pytest.fixture
def sluice_rules():
    """The rules the app's limiter enforces in tests: the file it ships."""
    return Path(__file__).parent / "rules.yaml"
