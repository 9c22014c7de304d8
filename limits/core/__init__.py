"""What every domain package of the control plane stands on.

``audit`` (the Actor of every change and the one audited write), ``roles`` (who
may do what), ``store`` (the Redis client), ``secrets`` (encryption at rest),
``egress`` (which addresses outbound HTTP may reach), ``jobs`` (Celery work
queued after commit). Nothing here imports another package of ``limits``.
"""
