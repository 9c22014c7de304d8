"""Celery work that services queue: by task name, once the current transaction commits.

A service names the task it needs instead of importing it: each package's
``tasks.py`` imports the services its tasks wrap, so importing the tasks back
would be a cycle. Task names are stable (queued messages and beat's schedule
refer to them); each is declared once, beside the service that queues it, and
the task takes its name from there.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import current_app
from django.db import transaction

__all__ = ["enqueue_on_commit"]


def enqueue_on_commit(task_name: str, *args: Any) -> None:
    """Send ``task_name(*args)`` to the workers when the transaction commits (at once
    outside one); a broker that is down loses the message, not the transaction:
    the beat tasks that look for unsent work re-queue it."""
    transaction.on_commit(
        partial(current_app.send_task, task_name, args=args), robust=True
    )
