"""``python -m controlplane.devservices serve | wait-for FILE`` (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import dj_database_url

from controlplane.devservices.launcher import plan, serve, wait_for
from controlplane.devservices.process import StartFailed
from controlplane.preflight import redact


def serve_configured() -> int:
    """serve() whatever the settings' DATABASE_URL, REDIS_URL and CELERY_BROKER_URL need."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.conf import settings

    try:
        # A private cluster's superuser is the admin role: the owner and runtime
        # roles are made in it by manage.py db_roles.
        servers, using = plan(
            database=dj_database_url.parse(settings.DATABASE_ADMIN_URL),
            database_url=settings.DATABASE_ADMIN_URL,
            redis_urls={
                "REDIS_URL": settings.REDIS_URL,
                "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            },
            var=Path(settings.BASE_DIR) / "var",
        )
    except StartFailed as exc:
        print(str(exc), file=sys.stderr)
        return 1
    for line in using:
        print(line, flush=True)
    for server in servers:
        print(
            f"nothing answers for {redact(server.url)}: starting a private {server.name}",
            flush=True,
        )
    return serve(servers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controlplane.devservices")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "serve", help="private Postgres and Redis where nothing answers"
    )
    waiting = commands.add_parser("wait-for", help="return once FILE exists")
    waiting.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "wait-for":
        wait_for(args.file)
        return 0
    return serve_configured()


if __name__ == "__main__":
    sys.exit(main())
