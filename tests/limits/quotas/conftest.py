"""Fixtures of the quota tests."""

from tests.limits.quotas.quota_fixtures import redis_stopped  # noqa: F401  (fixture)
