"""Private Postgres and Redis for ``make run``, where nothing answers on the configured ones.

``make run`` starts ``python -m controlplane.devservices serve`` as one process of its
honcho run (Procfile.dev). For DATABASE_ADMIN_URL (the superuser's: DATABASE_URL unless
set), REDIS_URL and CELERY_BROKER_URL it looks
whether anything accepts connections on the URL's host and port. What answers is used
as it is. Where nothing does and the host is this machine (a loopback address), it
starts a server of its own there: a PostgreSQL cluster in ``var/postgres`` (created by
``initdb`` on first use and kept between runs, trust authentication, the URL's user as
superuser) and a ``redis-server`` that keeps nothing on disk. Their logs go to
``var/postgres.log`` and ``var/redis-<port>.log``. They run until honcho stops the
process (Ctrl-C), then shut down. A server that cannot be started ends the process
with preflight's one line for the unreachable service, which stops the honcho run.

``python -m controlplane.devservices wait-for FILE`` returns once FILE exists: the
processes that need the demo data wait so for the web process to load it.

Production never runs this package: its URLs point at managed Postgres and Redis.
"""

from controlplane.devservices.launcher import plan, serve, wait_for
from controlplane.devservices.postgres import PrivatePostgres
from controlplane.devservices.process import Address, PrivateServer, StartFailed
from controlplane.devservices.redis_server import PrivateRedis

__all__ = [
    "Address",
    "PrivatePostgres",
    "PrivateRedis",
    "PrivateServer",
    "StartFailed",
    "plan",
    "serve",
    "wait_for",
]
