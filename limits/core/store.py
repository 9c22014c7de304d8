"""The control plane's Redis client: one connection pool per URL, read from settings at call time."""

from __future__ import annotations

import functools

import redis
from django.conf import settings

__all__ = ["redis_client"]


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30
    )


def redis_client() -> redis.Redis:
    """The client for ``settings.REDIS_URL`` (shared by every caller in this process)."""
    return _client(settings.REDIS_URL)
