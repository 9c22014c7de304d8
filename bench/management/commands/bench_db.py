"""Bench only: ``manage.py bench_db --recreate`` drops and re-creates the bench database.

Refuses any database whose name does not end in ``_bench``, so it can never
empty the developer's or the machine's database.
"""

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Drop and re-create the bench database (its name must end in _bench)."

    def add_arguments(self, parser):
        parser.add_argument("--recreate", action="store_true", required=True)

    def handle(self, *args, **options):
        db = settings.DATABASES["default"]
        name = db["NAME"]
        if not name.endswith("_bench"):
            raise CommandError(f"refusing to drop {name!r}: not a *_bench database")
        params = {
            "host": db.get("HOST") or None,
            "port": db.get("PORT") or None,
            "user": db.get("USER") or None,
            "password": db.get("PASSWORD") or None,
            "autocommit": True,
        }
        with psycopg.connect(dbname="postgres", **params) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
