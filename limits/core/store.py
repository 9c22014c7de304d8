"""The control plane's Redis client: one connection pool per URL, read from settings at call time."""

from __future__ import annotations

import functools

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["redis_client"]


@functools.cache
def _client(url: str, timeout: float | None) -> redis.Redis:
    if timeout is None:
        return redis.Redis.from_url(
            url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=30
        )
    return redis.Redis.from_url(  # one try: the caller has an answer without Redis
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
        retry=Retry(NoBackoff(), 0),
    )


def redis_client(*, timeout: float | None = None) -> redis.Redis:
    """The client for ``settings.REDIS_URL`` (shared by every caller in this process).

    By default calls wait up to 2 s and redis-py retries them. With ``timeout``,
    a call waits that long and is not retried: the gateways' poll path, which
    answers without Redis when it must (``limits.gateways.polling``), so that a
    paused Redis cannot hold a poll.
    """
    return _client(settings.REDIS_URL, timeout)
