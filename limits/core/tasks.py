"""Celery tasks of the core package: the audit chain's periodic checkpoint."""

from celery import shared_task

__all__ = ["audit_checkpoint_task"]


@shared_task(name="limits.audit_checkpoint")
def audit_checkpoint_task() -> int | None:
    """Write a signed checkpoint of the audit chain's head (beat, every
    ``SLUICE_AUDIT_CHECKPOINT_INTERVAL`` seconds); the entry it saw, if any."""
    from limits.core.checkpoints import checkpoint_take, checkpoint_write

    checkpoint = checkpoint_take()
    if checkpoint is None:
        return None
    checkpoint_write(checkpoint)
    return checkpoint.entry
